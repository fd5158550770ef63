#!/usr/bin/env bash
# session 38, issue 42: the stage 2 of the adapter before (fbde002: no joined lines) again in bfloat16 (as the
# joined runs), seeds 0 and 1, then first 500 TED lines slot 16 wait-3/5/7 each. One core, resumable.
cd /work/main
export OMP_NUM_THREADS=1
T=/work/shared/data/iwslt17/tst2017.en-de
for seed in 0 1; do
  O=/work/runs/nojoin/s$seed
  if [ ! -f $O/expost/adapter/adapter_config.json ]; then
    R=""; ls -d $O/expost/checkpoint-* >/dev/null 2>&1 && R=--resume
    echo "[$(date +%T)] train seed $seed $R"
    taskset -c ${CORE:-0} .venv/bin/simulmt finetune --train-source /work/runs/nojoin/mix.en \
      --train-target /work/runs/nojoin/mix.de --model gemma-3-270m --recipe expost --slot 16 \
      --init-adapter /work/runs/stage2j/stage1 --k-mix 1,3,5,7,9 --lr 0.0002 --warmup-steps 10 \
      --batch-size 8 --grad-accum 4 --epochs 1 --bf16 --save-steps 10 --seed $seed --output $O/expost $R || exit 1
  fi
  for k in 3 5 7; do
    echo "[$(date +%T)] eval seed $seed k=$k"
    taskset -c ${CORE:-0} .venv/bin/python -c "import torch,sys; torch.set_num_threads(1); sys.argv=['simulmt']+sys.argv[1:]; from simulmt.cli import main; sys.exit(main())" \
      evaluate --source $T.en --reference $T.de --ks $k --layouts expost --no-offline --slot 16 \
      --adapter $O/expost/adapter --batch-size 16 --lines 500 --output $O/eval/ted500-slot16-k$k || exit 1
  done
done
echo "[$(date +%T)] ALLDONE"
