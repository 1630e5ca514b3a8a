#!/usr/bin/env bash
# The A/B call of 2026-12-05 (docs/perf-history.md, "SIMPLE's writers staged
# in shared memory"): build; the writers' inputs staged one step ahead
# (staged-writers.patch) and two steps ahead (staged-writers-3.patch) as
# variants of the tree (scripts/patch_variant.py -> scripts/perf-variants.sh,
# base first and last), every SIMPLE sweep both codecs touch; then Nsight
# Compute on the one-step variant's SIMPLE fp8 and native kernels at cp 8,
# 1024 rows. Logs packed into $OUT/ab.tgz. From the tree's root on the GPU
# machine:   docs/data/sweeps/staged-writers/ab-call.sh COMMIT
export NCCL_DCP_REQUIRE_GPU=1 COMMIT=$1
D=$OUT; G=/tmp/ab-$(date +%s); mkdir -p $G
start=$(date +%s)
OUT=$G/check timeout -s TERM 150 scripts/gpu-check.sh build > $G/build.txt 2>&1; echo "build rc $? $(( $(date +%s) - start )) s"
tail -3 $G/build.txt
F="-H 16 --head-dim 512 -d bf16 -w 5 -m 10 -G 1 -n 30 -c 1 -B 0 -F 0"
T="-P SIMPLE --min-rows 16 --max-rows 1024 -f 4"
S="--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T --wire fp8 --scatter token;--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T"
S="$S;--virtual-ranks 4 $F $T;--virtual-ranks 8 $F $T --scatter token;--virtual-ranks 8 $F $T --scatter none"
S="$S;--virtual-ranks 2 $F $T;--virtual-ranks 2 $F $T --wire fp8"
: > $G/args
for n in staged:staged-writers staged3:staged-writers-3; do
  python3 scripts/patch_variant.py ${n%%:*} docs/data/sweeps/staged-writers/${n#*:}.patch >> $G/args || echo "patch_variant $n failed"
done
mapfile -d '' -t v < $G/args
timeout -s TERM 430 scripts/perf-variants.sh build-gpu $G/v "$S" "${v[@]}" > $G/v.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - start )) s"; grep -v '^ok' $G/v.txt | head
python3 scripts/compare_variants.py $G/v > $G/v-table.md 2>&1; cat $G/v-table.md
left=$(( 575 - ($(date +%s) - start) ))
if [ $left -gt 80 ] && git apply docs/data/sweeps/staged-writers/staged-writers.patch; then
  timeout -s TERM $(( left - 15 )) bash -c "ninja -C build-gpu perf/dcp_a2a_lse_reduce_perf > $G/ncu-build.log 2>&1 &&
    scripts/profile-ncu.sh build-gpu/perf/dcp_a2a_lse_reduce_perf $G/ncu SIMPLE:fp8:head:1024 SIMPLE:native:head:1024" 2>&1 | tail -12
  git apply -R docs/data/sweeps/staged-writers/staged-writers.patch
  echo "ncu $(( $(date +%s) - start )) s"
fi
tar czf $D/ab.tgz -C $(dirname $G) $(basename $G)
