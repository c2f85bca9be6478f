#!/usr/bin/env bash
# mpi_scaling.sh: wall-clock seconds against N for one process, one rank and two ranks (one per GPU),
# with a check first that the ranks land on different GPUs and write the same bytes as one process.
#
#   bench/mpi_scaling.sh [results-dir]      (SIZES="10 100 1000 5248 65536" REPEATS=2 WORK=/dev/shm/...)
#
# Every run is the whole job as a user runs it: start (mpirun, CUDA, model), read, generate, write
# PREFIX.txt and PREFIX.bmp. Outputs go to WORK (tmpfs by default, so that the disk's speed does not
# hide the scaling; each output is deleted after its run). Each time is the best of REPEATS runs
# (one run for N > 10000). Writes check.log, runs.log (every run's own summary) and table.md.
set -u
cd "$(dirname "$0")/.."
results=${1:-/tmp/facegen-bench}
work=${WORK:-/dev/shm/facegen-bench}
sizes=${SIZES:-10 100 1000 5248 65536}
repeats=${REPEATS:-2}
device=${DEVICE:-cuda}    # DEVICE=cpu tries the script on a machine without a GPU
check_n=${CHECK_N:-1000}
min_images=${MIN_IMAGES:-4096}  # the default --min-images-per-rank on GPUs (mpi/rank_job.cpp)
prog=build/facegen
model=build/random-network.bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_flags=(--bind-to none --oversubscribe --allow-run-as-root)
mkdir -p "$results" "$work"

for n in $sizes $check_n; do
  [ -f "$work/l$n.txt" ] && continue
  python3 - "$work/l$n.txt" "$n" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write(f"{n}\n")
    try:
        import numpy as np
        np.savetxt(f, np.random.default_rng(n).standard_normal((n, 100)), fmt="%.6f")
    except ImportError:
        import random
        rng = random.Random(n)
        for _ in range(n):
            f.write(" ".join(f"{rng.gauss(0, 1):.6f}" for _ in range(100)) + "\n")
PY
done

now() { date +%s.%N; }
# run_timed LABEL COMMAND...: runs it, appends its output to runs.log, prints the seconds it took.
run_timed() {
  local label=$1
  shift
  local start end status
  start=$(now)
  "$@" > "$work/run.out" 2>&1
  status=$?
  end=$(now)
  { echo "### $label (exit $status)"; cat "$work/run.out"; } >> "$results/runs.log"
  [ $status -eq 0 ] || { echo "FAILED"; return 1; }
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f\n", e - s }'
}
best_of() {  # best_of TIMES LABEL COMMAND...
  local times=$1 label=$2 best= t
  shift 2
  for _ in $(seq "$times"); do
    t=$(run_timed "$label" "$@") || { echo FAILED; return; }
    rm -f "$work"/out.*
    best=$(awk -v a="$t" -v b="${best:-1e9}" 'BEGIN { print (a < b) ? a : b }')
  done
  echo "$best"
}

{
  echo "## check: where the ranks run, and their bytes against one process"
  nvidia-smi -L
  nvidia-smi topo -m 2>/dev/null | head -n 4
  "$prog" --device "$device" --model "$model" --input "$work/l$check_n.txt" --output "$work/one" --quiet && echo "one process: ok"
  for ranks in 2 4; do
    echo "--- $ranks ranks on the GPUs, --verbose --all-ranks, N=$check_n"
    mpirun "${mpirun_flags[@]}" -np "$ranks" "$prog" --device "$device" --model "$model" --input "$work/l$check_n.txt" \
      --output "$work/r$ranks" --verbose --all-ranks
    for ext in txt bmp; do
      if cmp "$work/r$ranks.$ext" "$work/one.$ext"; then echo "$ranks ranks: $ext identical to one process"; else echo "$ranks ranks: $ext DIFFERS"; fi
    done
  done
  rm -f "$work"/one.* "$work"/r2.* "$work"/r4.*
} > "$results/check.log" 2>&1
cat "$results/check.log"

{
  echo "| N | 1 process | 1 rank | 2 ranks, all working | 2 ranks, default (sit-out) | speedup, 2 ranks vs 1 |"
  echo "|---:|---:|---:|---:|---:|---:|"
} > "$results/table.md"
for n in $sizes; do
  times=$repeats
  [ "$n" -gt 10000 ] && times=1
  in=$work/l$n.txt
  single=-
  if [ "${SINGLE:-1}" = 1 ]; then  # SINGLE=0 leaves out the single-process column (its text is serial: slow)
    single=$(best_of "$times" "N=$n one process" "$prog" --device "$device" --model "$model" --input "$in" --output "$work/out")
  fi
  one=$(best_of "$times" "N=$n mpirun 1 rank" mpirun "${mpirun_flags[@]}" -np 1 "$prog" --device "$device" --model "$model" --input "$in" --output "$work/out")
  two=$(best_of "$times" "N=$n mpirun 2 ranks --all-ranks" mpirun "${mpirun_flags[@]}" -np 2 "$prog" --device "$device" --model "$model" --input "$in" --output "$work/out" --all-ranks)
  if [ "$n" -ge $((2 * min_images)) ]; then
    auto=$two  # both ranks work by default: the same run as the column before
    auto_text="= $two"
  else
    auto=$(best_of "$times" "N=$n mpirun 2 ranks default" mpirun "${mpirun_flags[@]}" -np 2 "$prog" --device "$device" --model "$model" --input "$in" --output "$work/out")
    auto_text=$auto
  fi
  speedup=$(awk -v a="$one" -v b="$auto" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
  echo "| $n | $single | $one | $two | $auto_text | $speedup |" | tee -a "$results/table.md"
done
cat "$results/table.md"
