#!/usr/bin/env bash
# files_round.sh: one GPU call for the file side of the batch job (a folder of PNGs in subfolders,
# O_DIRECT), in about eight minutes on one H200: build, the GPU tests of the stream of pieces, the
# same bytes with and without O_DIRECT and in both PNG layouts on the GPU's images, then
# bench/job_profile.sh (the stages of a bf16 tar job, the PNG folder's writers, facegen-bench-write's
# small-file and O_DIRECT ways) on /dev/shm and on the root disk, and bench/job.sh's rows with their
# CPU an image.
#
#   bash bench/files_round.sh           logs in $OUT (default /tmp/facegen-files), the table last
#   FACEGEN_PREBUILT=1                  build/ as carried or left by an earlier call: no build
#   DISK=/var/tmp/facegen-profile       the root disk's folder
#   N=1048576 DISK_N=65536              images of /dev/shm's jobs and of the disk's
# Carry .deps (bench/device_packages.sh) where the machine lacks the build's headers.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-files}
mkdir -p "$out"
. bench/device_packages.sh
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
echo "commit ${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}, $(date -u '+%F %H:%M UTC'), $(nproc) cores"
disk=${DISK:-/var/tmp/facegen-profile}
n=${N:-1048576}
disk_n=${DISK_N:-65536}
summary=$out/summary.txt
: > "$summary"

start=$SECONDS
if [ "${FACEGEN_PREBUILT:-0}" != 1 ]; then
  if ! make -j"$(nproc)" CUDA_ARCH="${CUDA_ARCH:-90a}" build/facegen build/facegen-gpu-tests build/facegen-bench-write \
       build/make-latents build/make-random-network > "$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"
    exit 1
  fi
  echo "build: $((SECONDS - start)) s"
fi
timeout 300 build/facegen-gpu-tests -tc="*stream*" > "$out/gpu-tests.log" 2>&1
echo "GPU tests (*stream*): exit status $?, $(grep -E '^\[doctest\] test cases' "$out/gpu-tests.log")" | tee -a "$summary"

# same_bytes LABEL DIR ENV-A ENV-B ARGS...: the job with each environment setting; the folders compared.
same_bytes() {
  local label=$1 dir=$2 a=$3 b=$4
  shift 4
  rm -rf "$dir/a" "$dir/b" && mkdir -p "$dir/a" "$dir/b"
  env "$a" timeout 300 build/facegen --device cuda --precision bf16 "$@" --output "$dir/a/r" -q 2> "$out/same.err" &&
    env "$b" timeout 300 build/facegen --device cuda --precision bf16 "$@" --output "$dir/b/r" -q 2>> "$out/same.err"
  local status=$?
  if [ $status -ne 0 ]; then
    echo "  $label: FAILED (exit $status): $(head -c 200 "$out/same.err")" | tee -a "$summary"
  elif diff -r "$dir/a" "$dir/b" > /dev/null; then
    echo "  $label: the same bytes ($(du -sh "$dir/a" | cut -f1))" | tee -a "$summary"
  else
    echo "  $label: DIFFER: $(diff -rq "$dir/a" "$dir/b" | head -2 | tr '\n' ' ')" | tee -a "$summary"
  fi
  rm -rf "$dir/a" "$dir/b"
}
mkdir -p "$disk" /dev/shm/facegen-files
echo "checks:" | tee -a "$summary"
same_bytes "bf16 tar, npy-u8, npy shards of 4,099 on $disk, O_DIRECT on / off" "$disk" FACEGEN_DIRECT_WRITES=on \
  FACEGEN_DIRECT_WRITES=off --random 65536 --formats tar,npy-u8,npy --shard-images 4099
# The subfolders layout against the flat one: each file the flat one's (moved into one folder first).
rm -rf /dev/shm/facegen-files/* && mkdir -p /dev/shm/facegen-files/flat
timeout 300 build/facegen --device cuda --precision bf16 --random 20000 --formats png --output /dev/shm/facegen-files/flat/r -q &&
  timeout 300 build/facegen --device cuda --precision bf16 --random 20000 --formats png --png-layout subfolders \
    --output /dev/shm/facegen-files/sub -q &&
  mkdir /dev/shm/facegen-files/moved && find /dev/shm/facegen-files/sub -name '*.png' -exec mv -t /dev/shm/facegen-files/moved {} + &&
  diff -r /dev/shm/facegen-files/flat/r /dev/shm/facegen-files/moved > /dev/null &&
  echo "  bf16 png folder, 20,000 images: subfolders hold the flat layout's files" | tee -a "$summary" ||
  echo "  bf16 png folder, subfolders against flat: DIFFER or FAILED" | tee -a "$summary"
rm -rf /dev/shm/facegen-files

OUT=$out/shm N=$n timeout 420 bash bench/job_profile.sh /dev/shm/facegen-profile > "$out/profile-shm.log" 2>&1 ||
  echo "job_profile.sh on /dev/shm: exit status $?" | tee -a "$summary"
OUT=$out/disk N=$disk_n PREFAULT_MIB=0 BENCH_MIB=1024 BENCH_FILES=32768 timeout 420 bash bench/job_profile.sh "$disk" \
  > "$out/profile-disk.log" 2>&1 || echo "job_profile.sh on $disk: exit status $?" | tee -a "$summary"
JOBS="tar npy-u8 png png-sub" PRECISIONS=bf16 KERNELS=0 N=$n timeout 300 bash bench/job.sh /dev/shm/facegen-job \
  > "$out/job.log" 2>&1 || echo "job.sh: exit status $?" | tee -a "$summary"
rm -rf /dev/shm/facegen-profile /dev/shm/facegen-job "$disk"

echo
echo "== files_round: $((SECONDS - start)) s; logs in $out"
cat "$summary"
for table in "$out/shm/table.txt" "$out/disk/table.txt"; do [ -f "$table" ] && cat "$table"; done
grep -E '^  (job|bf16)' "$out/job.log"
