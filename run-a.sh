#!/usr/bin/env bash
# Session run A: build, every test suite, the topology; then a planted failure.
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
REAL_OUT=$OUT; export OUT=/tmp/logs-a; mkdir -p $OUT
nvidia-smi topo -m
scripts/gpu-check.sh build tests topology; echo "== clean run exit status $?"
OUT=/tmp/logs-plant TEST_SUITES=unit scripts/gpu-check.sh --plant-failure tests > /tmp/planted.txt 2>&1; echo "== planted run exit status $?"
tail -6 /tmp/planted.txt; cp /tmp/planted.txt $OUT/
tar czf $REAL_OUT/logs-a.tgz -C /tmp logs-a
