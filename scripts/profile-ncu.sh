#!/usr/bin/env bash
# Nsight Compute on the loopback fused kernel (docs/perf.md "Where the time
# goes"): one kernel launch per (protocol, wire, mode, rows), `ncu --set full`
# (clocks left alone), the details page as text under $LOGS/ncu-*.txt and the
# per-instruction samples as $LOGS/ncu-*-sass.csv.
#   scripts/profile-ncu.sh <perf binary> <logs dir> [P:wire:scatter:rows ...]
set -uo pipefail
perf=$1 logs=$2
shift 2
mkdir -p "$logs"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu on this machine"; exit 1; }
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(LL128:native:head:1 LL128:native:head:32 LL128:native:head:256 SIMPLE:native:head:1024
  LL128:fp8:head:32 LL128:fp8:head:256 SIMPLE:fp8:head:1024)
status=0
for c in "${cases[@]}"; do
  IFS=: read -r P wire scatter rows <<< "$c"
  name=ncu-$P-$wire-$scatter-$rows
  # The fused kernel is nccl_dcp::fusedKernel<Protocol, Mode, Codec, Peers>
  # (src/device/kernel.h) since 0.5: a filter naming 0.4's kernels matches
  # nothing, and ncu then profiles nothing without failing.
  "$ncu" --clock-control none --set full -k 'regex:fusedKernel' --launch-skip 12 --launch-count 1 \
    -o "$logs/$name" -f "$perf" --virtual-ranks 8 -H 16 --head-dim 512 -d bf16 --min-rows "$rows" --max-rows "$rows" -P "$P" \
    --wire "$wire" --scatter "$scatter" -G 0 -n 2 -w 1 -m 10 -c 0 -B 0 -F 0 > "$logs/$name.log" 2>&1 || status=1
  if grep -q "No kernels were profiled" "$logs/$name.log" || [ ! -f "$logs/$name.ncu-rep" ]; then
    echo "$name: ncu profiled no kernel (see $name.log)"
    status=1
    continue
  fi
  "$ncu" --import "$logs/$name.ncu-rep" --page details > "$logs/$name.txt" 2>&1 || status=1
  # Per-instruction warp-state samples (SASS), for where a kernel stalls; an
  # ncu without the source page leaves only the details page.
  "$ncu" --import "$logs/$name.ncu-rep" --page source --csv --print-source sass > "$logs/$name-sass.csv" 2>&1 ||
    echo "$name: no per-instruction page from this ncu (see $name-sass.csv)"
  rm -f "$logs/$name.ncu-rep"
  grep -E "^  [a-zA-Z]|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Local Memory Spill" "$logs/$name.txt" | head -20
done
exit $status
