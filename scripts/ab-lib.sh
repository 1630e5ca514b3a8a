# The A/B calls' one harness (docs/perf-history.md: a change timed as a
# variant of the tree before it lands). Sourced by each call script under
# docs/data/sweeps/, on the GPU machine from the tree's root:
#   source scripts/ab-lib.sh
#   ab_build COMMIT                     gpu-check.sh build; the logs' folder in $G
#   ab_sweeps "CP ARGS"...              the SWEEPS of ab_variants: each a loopback run
#                                       of CP virtual ranks, AB_FLAGS, then its ARGS
#   ab_variants SECONDS SWEEPS NAME:PATCH...
#                                       each PATCH (docs/data/sweeps/PATCH.patch) a
#                                       variant (scripts/patch_variant.py; a NAME given
#                                       twice stacks its patches), timed against the
#                                       tree, first and last (scripts/perf-variants.sh,
#                                       SWEEPS ';' between sweeps, SECONDS at most), then
#                                       tabled (scripts/compare_variants.py)
#   ab_left                             seconds left of a call's 575 from ab_build
#   ab_profile MIN PATCH CASE...        with more than MIN seconds left: the tree with
#                                       PATCH applied, rebuilt, under Nsight Compute
#                                       (scripts/profile-ncu.sh CASE...), then restored
#   ab_pack                             $G packed into $OUT/ab.tgz
# AB_FLAGS and AB_SIMPLE are the sweeps' common perf arguments: loopback
# Hl 16, D 512, bf16, graphs, every row checked against the CPU model; SIMPLE
# at 16-1024 rows.
AB_FLAGS="-H 16 --head-dim 512 -d bf16 -w 5 -m 10 -G 1 -n 30 -c 1 -B 0 -F 0"
AB_SIMPLE="-P SIMPLE --min-rows 16 --max-rows 1024 -f 4"

ab_build() {
  export NCCL_DCP_REQUIRE_GPU=1 COMMIT=$1
  AB_OUT=$OUT AB_START=$(date +%s) G=/tmp/ab-$(date +%s)
  mkdir -p "$G"
  OUT=$G/check timeout -s TERM 150 scripts/gpu-check.sh build > "$G/build.txt" 2>&1
  echo "build rc $? $(( $(date +%s) - AB_START )) s"
  tail -3 "$G/build.txt"
}

ab_sweeps() {
  local spec out=""
  for spec in "$@"; do out+="${out:+;}--virtual-ranks ${spec%% *} $AB_FLAGS ${spec#* }"; done
  echo "$out"
}

ab_variants() {
  local seconds=$1 sweeps=$2 n v
  shift 2
  : > "$G/args"
  for n in "$@"; do
    python3 scripts/patch_variant.py "${n%%:*}" "docs/data/sweeps/${n#*:}.patch" >> "$G/args" ||
      echo "patch_variant $n failed"
  done
  mapfile -d '' -t v < "$G/args"
  timeout -s TERM "$seconds" scripts/perf-variants.sh build-gpu "$G/v" "$sweeps" "${v[@]}" > "$G/v.txt" 2>&1
  echo "A/B rc $? $(( $(date +%s) - AB_START )) s"
  grep -v '^ok' "$G/v.txt" | head
  python3 scripts/compare_variants.py "$G/v" > "$G/v-table.md" 2>&1
  cat "$G/v-table.md"
}

ab_left() { echo $(( 575 - ($(date +%s) - AB_START) )); }

ab_profile() {
  local min=$1 patch=docs/data/sweeps/$2.patch left
  shift 2
  left=$(ab_left)
  [ "$left" -gt "$min" ] && git apply "$patch" || return 0
  timeout -s TERM $((left - 15)) bash -c "ninja -C build-gpu perf/dcp_a2a_lse_reduce_perf > $G/ncu-build.log 2>&1 &&
    scripts/profile-ncu.sh build-gpu/perf/dcp_a2a_lse_reduce_perf $G/ncu $*" 2>&1 | tail -12
  git apply -R "$patch"
  echo "ncu $((575 - $(ab_left))) s"
}

ab_pack() { tar czf "$AB_OUT/ab.tgz" -C "$(dirname "$G")" "$(basename "$G")"; }
