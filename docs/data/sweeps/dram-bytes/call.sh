#!/usr/bin/env bash
# DRAM bytes read and written by one loopback fused kernel (cp 8, Hl 16,
# D 512, bf16, SIMPLE HEAD, 1024 rows, both wires), against what the ideal
# counts (docs/perf.md "Ceilings"): whether the merges read the workspace
# back from DRAM or from L2. Logs packed into $OUT/dram.tgz.
#   docs/data/sweeps/dram-bytes/call.sh COMMIT
export NCCL_DCP_REQUIRE_GPU=1 COMMIT=$1
D=$OUT; G=/tmp/dram-$(date +%s); mkdir -p $G
OUT=$G/check timeout -s TERM 120 scripts/gpu-check.sh build > $G/build.txt 2>&1; echo "build rc $?"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sector_op_read_hit_rate.pct,gpu__time_duration.sum
for wire in native fp8; do
  timeout -s TERM 60 "$ncu" --clock-control none --metrics $M -k 'regex:fusedKernel' --launch-skip 12 --launch-count 1 \
    build-gpu/perf/dcp_a2a_lse_reduce_perf --virtual-ranks 8 -H 16 --head-dim 512 -d bf16 --min-rows 1024 --max-rows 1024 \
    -P SIMPLE --wire $wire --scatter head -G 0 -n 2 -w 1 -m 10 -c 0 -B 0 -F 0 > $G/ncu-$wire.txt 2>&1
  echo "== $wire rc $?"; grep -E 'dram__|lts__|gpu__time' $G/ncu-$wire.txt
done
tar czf $D/dram.tgz -C $(dirname $G) $(basename $G)
