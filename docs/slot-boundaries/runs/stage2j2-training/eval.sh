#!/usr/bin/env bash
# session 37, issue 42: the stage 2 with every second news line joined on the first 500 TED lines, slot 16 / 64, wait-3/5/7; then news dev and
# Multi30k (100 lines, wait-3) as the session-32 stage was checked. Waits for the training to finish; resumable
# (evaluate continues a run from its log).
cd /work/main
# (the training has finished: no wait loop; two copies of a pgrep loop see each other)
[ -f /work/runs/stage2j2/expost/adapter/adapter_config.json ] || { echo "no adapter"; exit 1; }
T=/work/shared/data/iwslt17/tst2017.en-de
A=/work/runs/stage2j2/expost/adapter
run() { taskset -c ${CORES:-0,1} .venv/bin/python -c "import torch,sys; torch.set_num_threads(${THREADS:-2}); sys.argv=['simulmt']+sys.argv[1:]; from simulmt.cli import main; sys.exit(main())" "$@"; }
for k in 3 5 7; do for s in ${SLOTS:-16 64}; do
  echo "[$(date +%T)] ted k=$k slot=$s"
  run evaluate --source $T.en --reference $T.de --ks $k --layouts expost --no-offline --slot $s --adapter $A \
    --batch-size 16 --lines 500 --output /work/runs/stage2j2/eval/ted500-slot$s
done; done
N=/work/shared/data/wmt-news/dev.en-de
M=/work/shared/data/multi30k/test2016
if [ "${SMALL:-both}" != m30k ]; then echo "[$(date +%T)] newsdev"
run evaluate --source $N.en --reference $N.de --lines 100 --ks 3 --layouts expost --no-offline --adapter $A \
  --batch-size 16 --output /work/runs/stage2j2/eval/newsdev
fi
if [ "${SMALL:-both}" != newsdev ]; then
echo "[$(date +%T)] m30k"
run evaluate --source $M.en --reference $M.de --lines 100 --ks 3 --layouts expost --no-offline --adapter $A \
  --batch-size 16 --output /work/runs/stage2j2/eval/m30k
fi
echo "[$(date +%T)] ALLDONE"
