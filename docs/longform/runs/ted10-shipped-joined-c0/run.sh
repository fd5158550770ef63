#!/usr/bin/env bash
# session 37: the new default adapter (stage 2 with joined sentences) on all ten TED talks, one stream a talk,
# expost wait-3, float32 (as docs/longform.md's cells); SHARD=i/2 on core CORE, 1 thread. Resumable.
cd /work/main
T=/work/shared/data/iwslt17/tst2017.en-de
taskset -c $CORE .venv/bin/python -c "import torch,sys; torch.set_num_threads(1); sys.argv=['simulmt']+sys.argv[1:]; from simulmt.cli import main; sys.exit(main())" \
  evaluate --source $T.en --reference $T.de --docids $T.docids --ks 3 --no-offline --layouts expost \
  --batch-size 3 --dtype float32 --shard $SHARD --output /work/runs/ted10new/shipped-expost-c0
