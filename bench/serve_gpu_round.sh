#!/usr/bin/env bash
# serve_gpu_round.sh: one GPU call for the service's data path, in about 6 minutes on one H200: the
# build, the service's suites on the GPU (SERVE_DEVICE=cuda: tests/suites/serve.sh, serve_oip.sh),
# then bench/serve.sh's rows (wrk on its own cores) for this build in bf16, tf32 and fp32, the
# --device synthetic ceiling of the same run, a few flag variants, and an old build beside it; a
# short table last.
#
#   bash bench/serve_gpu_round.sh OLD_BUILD    OLD_BUILD: a folder with a facegen built with CUDA at the
#                                              commit to compare with ("" or none: no old rows)
#   FACEGEN_PREBUILT=1       build/ as carried or left by an earlier call: no build
#   PRECISIONS ("bf16 tf32 fp32")   this build's precisions; OLD_PRECISIONS ("bf16 fp32") the old one's
#   ARGS ("--io-threads 4")  serve flags of this build's rows; OLD_ARGS ("") the old build's
#   VARIANTS                 "LABEL|FLAGS;..." more bf16 npy-u8 rows of this build (default: batch
#                            workers 1 and 3, max batch 512 and 1024)
#   SECONDS_PER_ROW (4), BATCH_IMAGES (500000), MODEL (the shipped faces model), SUITES (1), DEVICE
#   (cuda; synthetic: a dry run of the script on a machine without a GPU)
# Carry .deps: the Debian packages the build needs and wrk's (EXTRA_DEBS="wrk libluajit-5.1-2
# libluajit-5.1-common" ../shared/tools/device-deps.sh); bench/device_packages.sh unpacks them where
# missing. Logs go to $OUT (default /tmp/facegen-serve-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
old=${1:-}
out=${OUT:-/tmp/facegen-serve-gpu}
mkdir -p "$out"
. bench/device_packages.sh
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$out/gpu.txt"
echo "commit ${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}, $(date -u '+%F %H:%M UTC'), $(nproc) cores"
command -v wrk > /dev/null || { echo "serve_gpu_round: wrk is missing: carry it in .deps/debs (see the header)"; exit 1; }

start=$SECONDS
if [ "${FACEGEN_PREBUILT:-0}" != 1 ]; then
  if ! make -j"$(nproc)" CUDA_ARCH="${CUDA_ARCH:-90a}" build/facegen build/random-network.bin > "$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"
    exit 1
  fi
  echo "build: $((SECONDS - start)) s"
fi

if [ "${SUITES:-1}" = 1 ]; then
  for suite in serve serve_oip; do
    SERVE_DEVICE=cuda timeout 300 bash "tests/suites/$suite.sh" build > "$out/suite-$suite.log" 2>&1
    echo "suite $suite (SERVE_DEVICE=cuda): exit $?, $(tail -n 1 "$out/suite-$suite.log")"
    grep -E '^  (FAIL|info)' "$out/suite-$suite.log" | head -n 12
  done
fi

: > "$out/table"
# bench LABEL BUILD PRECISION ROWS SYNTHETIC FLAGS: one bench/serve.sh run, its rows into the table.
bench() {
  local label=$1 build=$2 precision=$3 rows=$4 synthetic=$5 flags=$6 log="$out/bench-$1-$3.log"
  DEVICE=${DEVICE:-cuda} PRECISION=$precision ROWS=$rows SYNTHETIC=$synthetic ARGS=$flags SECONDS_PER_ROW=${SECONDS_PER_ROW:-4} \
    BATCH_IMAGES=${BATCH_IMAGES_NOW:-0} MODEL=${MODEL:-models/facegen-faces.safetensors} OUT="$out/work-$1-$3" \
    timeout 240 bash bench/serve.sh "$build" > "$log" 2>&1
  echo "$label $precision ($flags): exit $?"
  grep -E '^(serve|synthetic) ' "$log" | sed "s/^serve /$label /; s/^/$precision /" | tee -a "$out/table"
  grep -E '^batch tool' "$log" | sed "s/^/$precision /" | tee -a "$out/batch"
}

rows="npy-u8 oip png1 png64"
for precision in ${PRECISIONS-bf16 tf32 fp32}; do
  synthetic=0
  [ "$precision" = bf16 ] && synthetic=1  # the ceiling needs no GPU: once
  BATCH_IMAGES_NOW=${BATCH_IMAGES:-500000} bench new build "$precision" "$rows" "$synthetic" "${ARGS---io-threads 4}"
done
IFS=';' read -r -a variants <<< "${VARIANTS-workers1|--io-threads 4 --batch-workers 1;workers3|--io-threads 4 --batch-workers 3;batch512|--io-threads 4 --max-batch 512;batch1024|--io-threads 4 --max-batch 1024}"
for variant in "${variants[@]}"; do
  [ -n "$variant" ] || continue
  bench "${variant%%|*}" build bf16 npy-u8 0 "${variant#*|}"
done
if [ -n "$old" ]; then
  for precision in ${OLD_PRECISIONS-bf16 fp32}; do
    SYNTHETIC_ARGS="" bench old "$old" "$precision" "$rows" 0 "${OLD_ARGS:-}"
  done
fi

echo
echo "precision build     row      images/s   p50 ms   p99 ms   server CPU us/image (by thread)"
awk '$4 == "no" { printf "%-9s %-9s %-7s no answers\n", $1, $2, $3; next }
     { cpu = ""; for (i = 15; i <= NF; ++i) cpu = cpu " " $i
       printf "%-9s %-9s %-7s %10s %8s %8s  %s\n", $1, $2, $3, $4, $7, $10, $13 cpu }' "$out/table"
[ -f "$out/batch" ] && cat "$out/batch"
echo "round: $((SECONDS - start)) s; logs in $out"
