#!/usr/bin/env bash
# session 37: the seed-1 run of the shipped stage 2 on the first 500 TED lines, slot 16, wait-$K (one k per process)
cd /work/main
T=/work/shared/data/iwslt17/tst2017.en-de
taskset -c $CORE .venv/bin/python -c "import torch,sys; torch.set_num_threads(1); sys.argv=['simulmt']+sys.argv[1:]; from simulmt.cli import main; sys.exit(main())" \
  evaluate --source $T.en --reference $T.de --ks $K --layouts expost --no-offline --slot 16 \
  --adapter /work/runs/stage2j-s1/expost/adapter --batch-size 16 --lines 500 --output /work/runs/stage2j-s1/eval/ted500-slot16-k$K
