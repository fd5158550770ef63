#!/usr/bin/env bash
# Get a checkout ready to send to a lent GPU machine for benchmarks/gpu_check.sh (that machine reaches no network
# and takes at most 64 MiB of files per call, tracked files included).
#
#   bash benchmarks/gpu_prepare.sh assets   # .gpu/: the converted gemma-3-270m's config and tokenizer (xz),
#                                           # source lines and the model's translations of them; .whl/: wheels
#                                           # its image lacks (both git-ignored)
#   bash benchmarks/gpu_prepare.sh out      # move the large tracked folders the check does not need out of the
#                                           # tree (docs/ alone is ~130 MB), to $STASH (default /tmp/simulmt-stash)
#   bash benchmarks/gpu_prepare.sh back     # put them back (do it right after the call)
#
# The call, from the repository root (its output ends with the tables; logs come back under $OUT):
#   carry [".whl", ".gpu"], command:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#       .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && bash benchmarks/gpu_check.sh .gpu $OUT 2>&1 | tee $OUT/run.log
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STASH=${STASH:-/tmp/simulmt-stash}
BIG=(docs simulmt/adapters/gemma-3-270m-interleaved-en-de simulmt/speech/models)
DATA=${DATA:-../shared/data/multi30k}

case "${1:-}" in
assets)
    grep -qx '/.gpu/' .git/info/exclude || echo '/.gpu/' >> .git/info/exclude
    grep -qx '/.whl/' .git/info/exclude || echo '/.whl/' >> .git/info/exclude
    CKPT=$(.venv/bin/python -c "from simulmt.models import _PACKAGED, _packaged_checkpoint; \
print(_packaged_checkpoint(_PACKAGED['gemma-3-270m'], None))")
    mkdir -p .gpu .whl
    cp "$CKPT"/{config.json,tokenizer_config.json} .gpu/
    [ ! -f "$CKPT/generation_config.json" ] || cp "$CKPT/generation_config.json" .gpu/
    xz -T2 -6 -c "$CKPT/tokenizer.json" > .gpu/tokenizer.json.xz
    head -n 256 "$DATA/test2016.en" > .gpu/src.en
    head -n 512 "$DATA/test2017.en" > .gpu/src512.en
    # the shipped model's own translations of src.en (gpu_host_profile.py --forced: real words and lengths on random
    # weights); made once, a few minutes on a CPU
    if [ "$(wc -l < .gpu/src.en)" != "$(wc -l 2>/dev/null < .gpu/hyp.de)" ]; then
        .venv/bin/simulmt translate --dtype bfloat16 --batch-size 16 .gpu/src.en > .gpu/hyp.de.tmp
        mv .gpu/hyp.de.tmp .gpu/hyp.de
    fi
    # the image's python is 3.12 with its own torch; transformers as CI has it, and what simulmt imports besides
    TRANSFORMERS=$(.venv/bin/python -c "import transformers; print(transformers.__version__)")
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "transformers==$TRANSFORMERS" gguf starlette uvicorn websockets
    du -sh .gpu .whl ;;
out)
    mkdir -p "$STASH"
    for p in "${BIG[@]}"; do [ -e "$p" ] && mkdir -p "$STASH/$(dirname "$p")" && mv "$p" "$STASH/$p"; done
    echo "moved ${BIG[*]} to $STASH: run '$0 back' after the call" ;;
back)
    for p in "${BIG[@]}"; do
        if [ -e "$STASH/$p" ] && [ ! -e "$p" ]; then mv "$STASH/$p" "$p"
        elif [ -e "$STASH/$p" ]; then echo "$p exists in the tree: left $STASH/$p where it is" >&2; fi
    done
    git status --short | head ;;
*)
    sed -n 2,14p "$0"; exit 2 ;;
esac
