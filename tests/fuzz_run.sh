#!/usr/bin/env bash
# fuzz_run.sh: runs libFuzzer targets, all at once, each first over its corpus in
# fuzz/corpus/<target>/ (every past finding stays fixed), then on new inputs.
#
# Usage: FUZZ_SECONDS=25 tests/fuzz_run.sh build/fuzz/fuzz_latents build/fuzz/fuzz_network
# FUZZ_SECONDS is each target's share of one core: with T targets on C cores (fewer than T), each
# runs FUZZ_SECONDS x T / C seconds, so a target gets the CPU time it would get alone in
# FUZZ_SECONDS, in less wall time than one after another. One process per target (no -jobs), each
# with a deadline; new inputs go to a scratch copy of the corpus, never into the repository; a
# crashing input is kept in FUZZ_ARTIFACTS (default: a scratch directory, printed).
# Prints one line per target with its executions; exit 0 when no target found anything.
set -u
cd "$(dirname "$0")/.."
. tests/lib/on_exit.sh
seconds=${FUZZ_SECONDS:-25}
scratch=$(mktemp -d /tmp/facegen-fuzz.XXXXXX)
artifacts=${FUZZ_ARTIFACTS:-$scratch/artifacts}
mkdir -p "$artifacts"
on_exit 'rm -rf "$scratch/corpus"'
cores=$(nproc)
wall=$seconds
[ $# -gt "$cores" ] && wall=$((seconds * $# / cores))
status=0
declare -A pids
for target in "$@"; do
  name=$(basename "$target")
  corpus=fuzz/corpus/$name
  [ -d "$corpus" ] || { echo "fuzz_run: no corpus $corpus for $target"; status=1; continue; }
  work=$scratch/corpus/$name
  mkdir -p "$work"
  cp "$corpus"/* "$work"/
  # The deadline: the corpus pass and the run itself, with room for a slow machine.
  timeout -s KILL $((wall * 2 + 120)) "$target" -max_total_time="$wall" -max_len=4096 -timeout=30 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$work" \
    > "$scratch/$name.log" 2>&1 &
  pids[$name]=$!
done
for target in "$@"; do
  name=$(basename "$target")
  [ -n "${pids[$name]:-}" ] || continue
  corpus=fuzz/corpus/$name
  log=$scratch/$name.log
  wait "${pids[$name]}"
  got=$?
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
  if [ $got -eq 0 ]; then
    echo "  ok    $name: ${runs:-?} executions in ${wall} s beside $(($# - 1)) other target(s), corpus $(ls "$corpus" | wc -l) files, no finding"
  else
    status=1
    echo "  FAIL  $name: exit status $got; the input is in $artifacts; log tail:"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|abort' "$log" | head -n 20 | sed 's/^/        /'
  fi
done
[ $status -eq 0 ] && rm -rf "$scratch"
exit $status
