#!/usr/bin/env bash
# session 37: the data card's runs for the stage-2-with-joined-lines adapter: TED first 300 lines wait-3, wait-5 and offline, Multi30k test2016 300 lines wait-3 (float32, batch 16)
cd /work/main
A=${A:-/work/runs/stage2j/expost/adapter}; O=${O:-/work/runs/stage2j/eval}
run() { taskset -c ${CORES:-0} .venv/bin/python -c "import torch,sys; torch.set_num_threads(${THREADS:-1}); sys.argv=['simulmt']+sys.argv[1:]; from simulmt.cli import main; sys.exit(main())" "$@"; }
T=/work/shared/data/iwslt17/tst2017.en-de; M=/work/shared/data/multi30k/test2016
echo "[$(date +%T)] offline"
run evaluate --source $T.en --reference $T.de --lines 300 --layouts expost --ks 3,5 --batch-size 16 --dtype float32 --adapter $A --output $O/card-ted300
echo "[$(date +%T)] m30k"
run evaluate --source $M.en --reference $M.de --lines 300 --layouts expost --ks 3 --no-offline --batch-size 16 --dtype float32 --adapter $A --output $O/card-m30k300
echo "[$(date +%T)] ALLDONE"
