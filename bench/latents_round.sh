#!/usr/bin/env bash
# latents_round.sh: one GPU call for the latents drawn on the GPU (docs/gpu.md, "Latents on the GPU"):
# build, the GPU tests of the drawn latents, the same bytes from GPU latents as from host latents for
# whole jobs, then the job's time and host CPU with either.
#
#   bash bench/latents_round.sh
#   FACEGEN_PREBUILT=1       build/ as carried or left by an earlier call: no build
#   N=1048576                images of the timed jobs (bf16, default model, into /dev/shm)
#   REPEATS=2                runs of each timed row; the table gives the best
#
# 1. GPU tests (build/facegen-gpu-tests): the GPU's latents against the host's, bit for bit; the GPU's
#    raw draws against glibc's; recipes through the CUDA backend against host latents.
# 2. Whole jobs, FACEGEN_GPU_LATENTS=host against the default (device): npy (float32 images) and
#    npy-u8 files compared with cmp, for --random, --seeds, --truncation, fp32 and bf16, odd --batch
#    and --chunk; and, where mpirun is, 2 ranks on the GPU against one process.
# 3. Timed rows: bf16 --random N into tar shards and npy-u8 shards, host latents and GPU latents, and
#    --seeds 0-(N-1) and --truncation 1 with GPU latents: images/s of the job (N / (total - load), from
#    the JSON summary), its wall time, the CPU seconds of the process (user and system) and the host
#    CPU per image.
# Logs go to $OUT (default /tmp/facegen-latents). The table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-latents}
mkdir -p "$out"
. bench/device_packages.sh
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
echo "commit ${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}, $(date -u '+%F %H:%M UTC'), $(nproc) cores"

start=$SECONDS
if [ "${FACEGEN_PREBUILT:-0}" != 1 ]; then
  if ! make -j"$(nproc)" CUDA=1 CUDA_ARCH="${CUDA_ARCH:-90a}" build/facegen build/facegen-gpu-tests > "$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"
    exit 1
  fi
  echo "build: $((SECONDS - start)) s"
fi
prog=build/facegen
results=()  # lines of the final table

# --- 1. GPU tests ---------------------------------------------------------------------------------
timeout 400 build/facegen-gpu-tests -tc="GPU latents*,GPU draws*,*given as recipes*,*stream of jobs*" \
  > "$out/gpu-tests.log" 2>&1
status=$?
grep -E "MESSAGE|largest difference|values made" "$out/gpu-tests.log" | sed 's/^/  /' | head -20
results+=("GPU tests: exit status $status, $(grep -E '^\[doctest\] test cases' "$out/gpu-tests.log")")

# --- 2. the same bytes from GPU latents as from host latents ----------------------------------------
work=/dev/shm/facegen-latents
rm -rf "$work" && mkdir -p "$work"
same=0 differ=0
# same_job NAME FLAGS...: the job with host latents and with GPU latents; every file equal.
same_job() {
  local name=$1
  shift
  rm -rf "$work/h" "$work/d" && mkdir -p "$work/h" "$work/d"
  if ! FACEGEN_GPU_LATENTS=host timeout 300 "$prog" --device cuda "$@" --output "$work/h/r" -q 2> "$out/err" ||
     ! timeout 300 "$prog" --device cuda "$@" --output "$work/d/r" -q 2>> "$out/err"; then
    echo "  FAILED to run: $name: $(head -c 300 "$out/err")"
    differ=$((differ + 1))
    return
  fi
  if diff -r -q "$work/h" "$work/d" > "$out/diff" 2>&1 && [ -n "$(ls "$work/d")" ]; then
    echo "  same bytes: $name ($(du -sh "$work/d" | cut -f1))"
    same=$((same + 1))
  else
    echo "  DIFFER: $name: $(head -3 "$out/diff")"
    differ=$((differ + 1))
  fi
}
for precision in fp32 bf16; do
  same_job "$precision --random 100001 --seed 7, npy" --precision "$precision" --random 100001 --seed 7 --formats npy
  same_job "$precision --seeds 0-30000,18446744073709551615,5,5 --truncation 0.8, npy and npy-u8" --precision "$precision" \
    --seeds 0-30000,18446744073709551615,5,5 --truncation 0.8 --formats npy,npy-u8
  same_job "$precision --random 50000 --seed 3 --truncation 2 --batch 1000 --chunk 777, npy" --precision "$precision" \
    --random 50000 --seed 3 --truncation 2 --batch 1000 --chunk 777 --formats npy
done
same_job "bf16 --random 40000 --seed 11, tar shards of 9999" --precision bf16 --random 40000 --seed 11 --formats tar \
  --shard-images 9999
if command -v mpirun > /dev/null && "$prog" --version | grep -q "MPI   yes"; then
  rm -rf "$work/one" "$work/two" && mkdir -p "$work/one" "$work/two"
  job=(--device cuda --precision bf16 --random 60000 --seed 5 --truncation 1.2 --formats npy-u8 --shard-images 7000)
  if "$prog" "${job[@]}" --output "$work/one/r" -q 2> "$out/err" &&
     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun -np 2 --oversubscribe --bind-to none \
       "$prog" "${job[@]}" --all-ranks --output "$work/two/r" -q 2>> "$out/err" &&
     diff -r -q "$work/one" "$work/two" > "$out/diff" 2>&1; then
    echo "  same bytes: 2 MPI ranks on the GPU against one process (${job[*]})"
    same=$((same + 1))
  else
    echo "  DIFFER or FAILED: 2 MPI ranks: $(head -c 300 "$out/err") $(head -3 "$out/diff")"
    differ=$((differ + 1))
  fi
fi
rm -rf "$work"/*
results+=("same bytes, GPU latents against host latents: $same jobs the same, $differ not")

# --- 3. timed rows ----------------------------------------------------------------------------------
n=${N:-1048576}
repeats=${REPEATS:-2}
# row NAME ENV-ASSIGNMENT FLAGS...: the best of $repeats runs, one table line.
row() {
  local name=$1 env_set=$2
  shift 2
  local best=
  for ((k = 0; k < repeats; k++)); do
    rm -rf "$work/t" && mkdir -p "$work/t"
    local line
    line=$(env $env_set python3 - "$work/t/summary.json" "$n" "$prog" --device cuda --precision bf16 "$@" \
           --output "$work/t/r" --summary-json "$work/t/summary.json" -q <<'PY'
import json, resource, subprocess, sys, time
path, n, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
start = time.perf_counter()
status = subprocess.call(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
wall = time.perf_counter() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
if status != 0:
    print(f"0|FAILED (exit status {status})")
    sys.exit(0)
s = json.load(open(path))
job = n / max(s["total"]["seconds"] - s["load_seconds"], 1e-9)
cpu = used.ru_utime + used.ru_stime
print(f"{job:.0f}|{job:12,.0f} {wall:8.2f} s {used.ru_utime:8.2f} {used.ru_stime:8.2f} {cpu / n * 1e6:9.2f}")
PY
)
    [[ $line == *"|"* ]] || line="0|FAILED (no result)"
    echo "  $name, run $((k + 1)): ${line#*|}" >> "$out/rows.log"
    # Best: the most images/s (the number before the bar).
    if [ -z "$best" ] || [ "${line%%|*}" -gt "${best%%|*}" ]; then best=$line; fi
  done
  results+=("$(printf '%-44s %s' "$name" "${best#*|}")")
  rm -rf "$work/t"
}
results+=("$(printf '%-44s %12s %10s %8s %8s %9s' "bf16, N = $n, /dev/shm" "images/s" "wall" "user s" "sys s" "CPU us/img")")
row "tar, host latents" "FACEGEN_GPU_LATENTS=host" --random "$n" --seed 1 --formats tar
row "tar, GPU latents" "FACEGEN_GPU_LATENTS=device" --random "$n" --seed 1 --formats tar
row "npy-u8 shards, host latents" "FACEGEN_GPU_LATENTS=host" --random "$n" --seed 1 --formats npy-u8 --shard-images 10000
row "npy-u8 shards, GPU latents" "FACEGEN_GPU_LATENTS=device" --random "$n" --seed 1 --formats npy-u8 --shard-images 10000
row "npy-u8 shards, --seeds, GPU latents" "FACEGEN_GPU_LATENTS=device" --seeds "0-$((n - 1))" --formats npy-u8 \
  --shard-images 10000
row "npy-u8 shards, --truncation 1, GPU latents" "FACEGEN_GPU_LATENTS=device" --random "$n" --seed 1 --truncation 1 \
  --formats npy-u8 --shard-images 10000
rm -rf "$work"

echo
echo "latents_round ($(date -u +%F), $(cat "$out/gpu.txt" 2> /dev/null | head -1)):"
printf '%s\n' "${results[@]}"
