#!/usr/bin/env bash
# session 37, issue 42: a second seed (1) of stage 2 of the shipped recipe again, from the stage-1 adapter (64066b0), with every third
# of its 2,100 news lines joined to the next sentence of its article (597 joined, 103 kept single); bf16 (stage 2
# was float32), 1 thread. Resumable (--save-steps; RESUME=--resume continues).
cd /work/main
export OMP_NUM_THREADS=${THREADS:-1}
exec taskset -c ${CORES:-1} .venv/bin/simulmt finetune --train-source /work/runs/stage2j/mix.en \
  --train-target /work/runs/stage2j/mix.de --model gemma-3-270m --recipe expost --slot 16 \
  --init-adapter /work/runs/stage2j/stage1 --k-mix 1,3,5,7,9 --lr 0.0002 --warmup-steps 10 \
  --batch-size 8 --grad-accum 4 --epochs 1 --bf16 --save-steps 10 \
  --seed 1 --output /work/runs/stage2j-s1/expost ${RESUME:-}
