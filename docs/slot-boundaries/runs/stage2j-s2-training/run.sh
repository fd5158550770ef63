#!/usr/bin/env bash
# session 38, issue 42: a third seed (2) of the shipped recipe (stage 2 with every third news line a candidate to be
# joined), then first 500 TED lines slot 16 wait-3/5/7. One core, resumable.
cd /work/main
export OMP_NUM_THREADS=1
T=/work/shared/data/iwslt17/tst2017.en-de
O=/work/runs/stage2j-s2
if [ ! -f $O/expost/adapter/adapter_config.json ]; then
  R=""; ls -d $O/expost/checkpoint-* >/dev/null 2>&1 && R=--resume
  echo "[$(date +%T)] train seed 2 $R"
  taskset -c ${CORE:-1} .venv/bin/simulmt finetune --train-source /work/runs/stage2j/mix.en \
    --train-target /work/runs/stage2j/mix.de --model gemma-3-270m --recipe expost --slot 16 \
    --init-adapter /work/runs/stage2j/stage1 --k-mix 1,3,5,7,9 --lr 0.0002 --warmup-steps 10 \
    --batch-size 8 --grad-accum 4 --epochs 1 --bf16 --save-steps 10 --seed 2 --output $O/expost $R || exit 1
fi
for k in 3 5 7; do
  echo "[$(date +%T)] eval k=$k"
  taskset -c ${CORE:-1} .venv/bin/python -c "import torch,sys; torch.set_num_threads(1); sys.argv=['simulmt']+sys.argv[1:]; from simulmt.cli import main; sys.exit(main())" \
    evaluate --source $T.en --reference $T.de --ks $k --layouts expost --no-offline --slot 16 \
    --adapter $O/expost/adapter --batch-size 16 --lines 500 --output $O/eval/ted500-slot16-k$k || exit 1
done
echo "[$(date +%T)] ALLDONE"
