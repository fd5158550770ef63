#!/usr/bin/env bash
# The CUDA path in one short run, for a lent GPU machine (no network, 64 MiB of files per call, a few minutes):
#   1. the engine with and without CUDA graphs, side by side (benchmarks/cuda_graphs.py): tokens/s, ms per forward,
#      same words;
#   2. the core's tests on tiny models, on the GPU (SIMULMT_TEST_DEVICE=cuda: parity, engine, guesses, decoding,
#      the static-shape decoder; every engine forward there is a recorded and replayed CUDA graph);
#   3. translate / --batch-size on the GPU: auto dtype, and --batch-size 16 == --batch-size 1 in float32;
#   4. what a forward costs when its launches are one CUDA graph, without the engine (benchmarks/gpu_ceiling.py);
#      with PROFILE=1 also where an eager forward's host time goes (host_overhead.py, profile_engine.py);
#   5. bench: streaming vs offline ms per target token, and many streams in bfloat16;
# on a Gemma-3-270M-shaped model with random weights (benchmarks/gpu_random_gemma.py says why and what that changes).
#
#   bash benchmarks/gpu_check.sh ASSETS OUT [DEVICE] [SCALE]
# ASSETS: config.json, tokenizer.json(.xz), tokenizer_config.json of the converted gemma-3-270m, and src.en /
# src512.en (source lines); OUT: where logs and tables go. DEVICE defaults to cuda; SCALE=small runs every step
# on a few lines (a dry run of the script on a CPU).
set -uo pipefail
ASSETS=$1; OUT=$2; DEVICE=${3:-cuda}; SCALE=${4:-full}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
ADAPTER=simulmt/adapters/gemma-3-270m-expost-kmix-en-de
MODEL=/tmp/gemma-random
if [ "$SCALE" = small ]; then
    L1=8; L2=4; S="1,2"; L3=8; S3="2"; LT=6; PD=float32; CEIL=1,2; LG=4; SG="1,2"; NG=2
else
    L1=32; L2=6; S="1,8,32"; L3=256; S3="64"; LT=16; PD=bfloat16; CEIL=1,16,64; LG=16; SG="1,16"; NG=6
fi
step() { printf '\n=== %s (%s s)\n' "$*" "$SECONDS"; }

step environment
$PY - <<'EOF'
import torch, transformers, sys
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
EOF

step "random gemma-3-270m-shaped model"
[ -f $MODEL/model.safetensors ] || $PY benchmarks/gpu_random_gemma.py "$ASSETS" $MODEL

step "the engine without and with CUDA graphs: $LG lines, streams $SG, $PD"
timeout 240 $PY benchmarks/cuda_graphs.py $MODEL --adapter $ADAPTER --source "$ASSETS/src.en" --lines $LG \
    --streams $SG --single $NG --dtype $PD --device "$DEVICE" 2>&1 | grep -v "Warning\|= func(\|warn\|it/s\]"

if [ "$DEVICE" != cpu ]; then
    step "core tests on tiny models, SIMULMT_TEST_DEVICE=$DEVICE"
    SIMULMT_TEST_DEVICE=$DEVICE timeout 180 $PY -m pytest -q -p no:cacheprovider -m "not slow and not data" \
        tests/test_parity.py tests/test_engine.py tests/test_speculation.py tests/test_decoding.py \
        tests/test_learned_policy.py tests/test_simulmask.py tests/test_static_decoder.py tests/test_prompt_cache.py \
        2>&1 | tee "$OUT/tests.log" | tail -25
fi

step "translate, --dtype auto on $DEVICE (what auto becomes)"
$PY -c "from simulmt.models import resolve_dtype; print('--dtype auto on $DEVICE ->', resolve_dtype('auto', '$DEVICE'))"
head -n 3 "$ASSETS/src.en" | $PY -m simulmt translate --model $MODEL --adapter $ADAPTER --device "$DEVICE" \
    --dtype auto --jsonl --max-words 12 > "$OUT/auto.jsonl" 2> "$OUT/auto.err"; echo "rc=$?"; grep -iv "warn\|= func(" "$OUT/auto.err" | tail -3
$PY -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(len(r), 'lines;', r[0]['prediction'][:80], sorted(r[0]))" "$OUT/auto.jsonl"

step "batched == one stream: $LT lines, float32, --batch-size 1 vs 16"
head -n $LT "$ASSETS/src.en" > /tmp/bs.en
for b in 1 16; do
    start=$SECONDS
    $PY -m simulmt translate --model $MODEL --adapter $ADAPTER --device "$DEVICE" \
        --dtype float32 --batch-size $b --max-words 12 /tmp/bs.en > "$OUT/bs$b.txt" 2> "$OUT/bs$b.err" \
        || { echo "FAILED (rc=$?):"; grep -v "Warning\|= func(" "$OUT/bs$b.err" | tail -4; }
    echo "batch $b: $((SECONDS - start)) s, $(grep -c . "$OUT/bs$b.txt") non-empty lines of $(wc -l < /tmp/bs.en)"
done
if [ -s "$OUT/bs1.txt" ] && cmp -s "$OUT/bs1.txt" "$OUT/bs16.txt"; then echo "SAME: --batch-size 16 prints what --batch-size 1 prints"
else echo "DIFFERENT:"; diff "$OUT/bs1.txt" "$OUT/bs16.txt" | head -8; fi

if [ "${PROFILE:-0}" = 1 ]; then
step "host time per forward: benchmarks/host_overhead.py (this machine's CPU), then the engine's ops on $DEVICE"
$PY benchmarks/host_overhead.py --threads 1 --sentences 4 2>&1 | grep -v "Warning\|= func(\|warn"
$PY benchmarks/profile_engine.py $MODEL --adapter $ADAPTER --device "$DEVICE" --dtype $PD --sentences 2 \
    --rows 14 2>&1 | grep -v "Warning\|= func(\|warn\|it/s\]\|USDT"
$PY benchmarks/profile_engine.py $MODEL --adapter $ADAPTER --device "$DEVICE" --dtype $PD --sentences 2 \
    --rows 1 --no-fuse 2>&1 | grep "torch ops each"   # the same without fused norms and MLPs (fused_layers.py)
fi
$PY benchmarks/gpu_ceiling.py $MODEL --dtype $PD --rows "$CEIL" 2>&1 | grep -v "Warning\|= func(\|warn\|it/s\]"

for dtype in ${BENCH_DTYPES:-bfloat16}; do
    step "bench: streaming vs offline, $L2 lines, $dtype"
    $PY -m simulmt bench --model $MODEL --adapter $ADAPTER --source "$ASSETS/src.en" --lines $L2 --device "$DEVICE" \
        --dtype $dtype --output "$OUT/bench-$dtype" 2>&1 | grep -v "^Loading\|it/s\]\|Warning\|= func(" | tail -14
done

step "bench --streams $S, $L1 lines, bfloat16"
$PY -m simulmt bench --model $MODEL --adapter $ADAPTER --source "$ASSETS/src.en" --lines $L1 --layouts expost \
    --policy wait-k --k 3 --streams $S --device "$DEVICE" --dtype bfloat16 --output "$OUT/streams" 2>&1 \
    | grep -v "^Loading\|it/s\]\|Warning\|= func(" | tail -12

step "bench --streams $S3, $L3 lines, bfloat16"
$PY -m simulmt bench --model $MODEL --adapter $ADAPTER --source "$ASSETS/src512.en" --lines $L3 --layouts expost \
    --policy wait-k --k 3 --streams $S3 --device "$DEVICE" --dtype bfloat16 --output "$OUT/streams-big" 2>&1 \
    | grep -v "^Loading\|it/s\]\|Warning\|= func(" | tail -8
step done
# what comes back (at most 8 files): the logs and the tables' JSON
for d in $(for t in ${BENCH_DTYPES:-bfloat16}; do echo "bench-$t"; done) streams streams-big; do
    for f in "$OUT/$d"/*.json; do [ -f "$f" ] && mv "$f" "$OUT/$d.json"; done; rm -rf "${OUT:?}/$d"
done
rm -f "$OUT"/*.err "$OUT"/bs*.txt
