#!/usr/bin/env bash
# engine_round.sh: one GPU call for the output engine, in under ten minutes on one GPU (or several):
# build, the GPU tests of the backend's stream of pieces, then bench/job.sh's rows (the user's whole
# job against the ceilings of the same run) on each folder given.
#
#   bash bench/engine_round.sh [DIR...]     default DIR: /dev/shm/facegen-job (job.sh pre-faults it)
#   JOBS, PRECISIONS, RANKS, N              passed to bench/job.sh (see there)
#   FACEGEN_PREBUILT=1                      build/ as carried or left by an earlier call: no build
#   FACEGEN_TESTS="*stream*"                the GPU test cases to run first (doctest -tc; "" for none)
#   JOB_SECONDS=420                         job.sh's deadline
# Carry .deps (the Debian packages the build needs, ../shared/tools/device-deps.sh): they are unpacked
# only where the build's headers are missing. Logs go to $OUT (default /tmp/facegen-engine).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-engine}
mkdir -p "$out"
missing=
for header in cxxopts.hpp doctest/doctest.h fast_float/fast_float.h libdeflate.h httplib.h stb/stb_image.h nlohmann/json.hpp; do
  [ -f "/usr/include/$header" ] || missing="$missing $header"
done
if [ -d .deps/debs ] && [ -n "$missing" ]; then
  for f in .deps/debs/*.deb; do dpkg -x "$f" / 2> /dev/null; done
fi
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$out/gpu.txt"
echo "commit ${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}, $(date -u '+%F %H:%M UTC'), $(nproc) cores"

start=$SECONDS
if [ "${FACEGEN_PREBUILT:-0}" != 1 ]; then
  if ! make -j"$(nproc)" CUDA_ARCH="${CUDA_ARCH:-90a}" build/facegen build/facegen-gpu-tests build/facegen-bench \
       build/facegen-bench-write build/make-latents build/make-random-network > "$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"
    exit 1
  fi
  echo "build: $((SECONDS - start)) s"
fi

tests=${FACEGEN_TESTS-*stream*}
if [ -n "$tests" ]; then
  timeout 300 build/facegen-gpu-tests -tc="$tests" > "$out/gpu-tests.log" 2>&1
  echo "GPU tests ($tests): exit status $?, $(grep -E '^\[doctest\] test cases' "$out/gpu-tests.log")"
fi

[ $# -gt 0 ] || set -- /dev/shm/facegen-job
timeout "${JOB_SECONDS:-420}" bench/job.sh "$@" 2>&1 | tee "$out/job.log"
for dir in "$@"; do rm -rf "$dir"; done
