#!/usr/bin/env bash
# encode_round.sh: one GPU call for the GPU's encoders of the 8-bit outputs (formats/encoded_run.hpp,
# kernels/encode_images.hpp): build, the GPU tests that hold their bytes to the CPU encoders, the whole
# job's files with the encoders on and off (tests/suites/encoded_runs.sh on the GPU), then the user's
# jobs with the encoders on and off (FACEGEN_GPU_ENCODERS), each row with its host CPU per image.
#
#   bash bench/encode_round.sh [DIR]        default DIR: /dev/shm/facegen-encode (pre-faulted first)
#   STAGES="build tests suite rows"         the stages to run (default: all, in this order)
#   N=1048576                               images of the tar, npy-u8 and bmp rows (png: N / 4)
#   PRECISIONS="bf16 fp32"  JOBS="tar npy-u8 png bmp"  BATCH=512 (--batch of every row)
#   FACEGEN_TESTS="GPU encoders*,GPU pipeline: jobs with encoded*,CUDA backend: a stream*,8-bit runs*"
#                                           the GPU test cases (doctest -tc; "*" for all of them)
# A row: the job's images/s without its start-up (N / (total - model load and backend start), from the
# run's JSON summary), the program's generation rate and its share of the kernels' own (facegen-bench
# at the same batch), then the host's CPU per image: user and system seconds of the process over N, in
# microseconds, and the cores busy. Each row's outputs are removed after it. Carry .deps where the
# machine lacks the build's headers (bench/device_packages.sh). Logs go to $OUT (default
# /tmp/facegen-encode); the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-encode}
mkdir -p "$out"
. bench/device_packages.sh
stages=" ${STAGES:-build tests suite rows} "
stage() { [[ $stages == *" $1 "* ]]; }
n=${N:-1048576}
precisions=${PRECISIONS:-bf16 fp32}
jobs=" ${JOBS:-tar npy-u8 png bmp} "
batch=${BATCH:-512}
dir=${1:-/dev/shm/facegen-encode}
failures=0
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$out/gpu.txt"
echo "commit ${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}, $(date -u '+%F %H:%M UTC'), $(nproc) cores"

if stage build; then
  start=$SECONDS
  if ! make -j"$(nproc)" CUDA_ARCH="${CUDA_ARCH:-90a}" build/facegen build/facegen-gpu-tests build/facegen-bench \
       build/make-latents build/make-random-network > "$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"
    exit 1
  fi
  echo "build: $((SECONDS - start)) s"
fi

if stage tests; then
  tests=${FACEGEN_TESTS-GPU encoders*,GPU pipeline: jobs with encoded*,CUDA backend: a stream*,8-bit runs*}
  timeout 420 build/facegen-gpu-tests -tc="$tests" > "$out/gpu-tests.log" 2>&1
  status=$?
  echo "GPU tests ($tests): exit status $status, $(grep -E '^\[doctest\] test cases' "$out/gpu-tests.log")"
  [ $status -eq 0 ] || { failures=$((failures + 1)); grep -B2 -A8 "ERROR" "$out/gpu-tests.log" | head -n 40; }
fi

if stage suite; then
  ENCODED_DEVICE=cuda timeout 540 bash tests/suites/encoded_runs.sh build > "$out/suite.log" 2>&1
  status=$?
  echo "whole jobs, encoders on and off (tests/suites/encoded_runs.sh, cuda): exit status $status, $(tail -n 1 "$out/suite.log")"
  [ $status -eq 0 ] || { failures=$((failures + 1)); grep FAIL "$out/suite.log" | head -n 10; }
fi

if stage rows; then
  mkdir -p "$dir" || exit 1
  dd if=/dev/zero of="$dir/fault" bs=1M count=8192 status=none; rm -f "$dir/fault"  # tmpfs's first pages cost more
  # The kernels' rate at the rows' batch, per precision (the default model's architecture).
  kernels_json=$out/kernels/results.json
  mkdir -p "$out/kernels"
  timeout 300 build/facegen-bench --tutorial-only --quick --out "$out/kernels" > "$out/kernels/log" 2>&1 ||
    echo "facegen-bench failed: $(tail -n 2 "$out/kernels/log")"
  table=$out/rows.txt
  printf '%-34s %-4s %11s %11s %8s %9s %9s %9s %6s\n' row gpu "job img/s" "gen img/s" gen/kern "user us" "sys us" \
    "cpu us" cores > "$table"
  # row ON|OFF NAME IMAGES ARGS...: one job, its figures appended to the table.
  row() {
    local state=$1 name=$2 images=$3
    shift 3
    rm -rf "$dir/out" && mkdir -p "$dir/out"
    python3 - "$state" "$name" "$images" "$kernels_json" "$table" "$p" "$batch" -- \
      env FACEGEN_GPU_ENCODERS="$state" build/facegen --device cuda --batch "$batch" "$@" --output "$dir/out/r" \
      --summary-json "$out/summary.json" -q <<'PY'
import json, os, resource, subprocess, sys, time
state, name, images, kernels_json, table, precision, batch = sys.argv[1:8]
images = int(images)
command = sys.argv[sys.argv.index("--") + 1:]
start = time.perf_counter()
status = subprocess.call(command, stderr=open(os.environ.get("OUT", "/tmp/facegen-encode") + "/row.stderr", "w"))
wall = time.perf_counter() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
if status != 0:
    line = f"{name:<34} {'on' if state == '1' else 'off':<4} FAILED (exit status {status})"
else:
    s = json.load(open(os.environ.get("OUT", "/tmp/facegen-encode") + "/summary.json"))
    job = images / max(s["total"]["seconds"] - s["load_seconds"], 1e-9)
    gen = s["stages"]["generate"]["images_per_second"] or 0
    try:
        kernels = json.load(open(kernels_json)).get(f"tutorial_{precision}_b{batch}_kernels", 0)
    except OSError:
        kernels = 0
    share = f"{gen / kernels:8.2f}" if kernels else f"{'-':>8}"
    user, system = used.ru_utime / images * 1e6, used.ru_stime / images * 1e6
    line = (f"{name:<34} {'on' if state == '1' else 'off':<4} {job:>11,.0f} {gen:>11,.0f} {share} {user:9.2f} "
            f"{system:9.2f} {user + system:9.2f} {(used.ru_utime + used.ru_stime) / wall:6.1f}")
print(line)
open(table, "a").write(line + "\n")
sys.exit(status)
PY
    [ $? -eq 0 ] || failures=$((failures + 1))
    rm -rf "$dir/out"
  }
  wanted() { [[ $jobs == *" $1 "* ]]; }
  for p in $precisions; do
    for state in 1 0; do
      wanted tar && row "$state" "$p -> tar (shards of 10,000)" "$n" --precision "$p" --random "$n" --formats tar
      wanted npy-u8 && row "$state" "$p -> npy-u8, shards of 65,536" "$n" --precision "$p" --random "$n" \
        --formats npy-u8 --shard-images 65536
      wanted png && row "$state" "$p -> png folder ($((n / 4)))" "$((n / 4))" --precision "$p" --random "$((n / 4))" \
        --formats png
      wanted bmp && row "$state" "$p -> bmp (split mosaics)" "$n" --precision "$p" --random "$n" --formats bmp
    done
  done
  rmdir "$dir" 2> /dev/null
  echo
  echo "rows on $dir (gpu: FACEGEN_GPU_ENCODERS; us: host CPU microseconds per image; --batch $batch):"
  cat "$table"
fi
echo "$failures stage(s) or row(s) failed"
[ $failures -eq 0 ]
