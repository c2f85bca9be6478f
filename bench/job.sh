#!/usr/bin/env bash
# job.sh: the user's whole job, from latents to finished files, beside the ceilings it waits on (for
# the GPU machine; DEVICE=cpu runs it anywhere, slowly).
#
#   bench/job.sh [DIR...]        default: /dev/shm/facegen-job (pre-faulted first) and the root disk
#   N=1048576 PRECISIONS="fp32 bf16" PROG=build/facegen bench/job.sh
#   RANKS="1 2 4" bench/job.sh   each row once per rank count: the program as one process (1) or as
#                                R MPI ranks on this host (mpirun --bind-to none), each on its own GPU
#   KERNELS=0 bench/job.sh       without the kernels' own rate (facegen-bench, a minute)
#   CEILING_MIB=64 DEVICE=cpu N=400 JOBS="png png-sub" bench/job.sh   a quick try of the script itself
#   JOBS="tar txt one" bench/job.sh   only these rows (names: tar tar500 npy-u8 npy-shards npy png png-sub
#                                bmp mosaic-png txt one); default: all
#
# For each folder it prints its write ceilings (build/facegen-bench-write: separate files and one
# file, 1, 4 and 16 writers), then, per precision, one row per job: --random N into tar shards, npy-u8
# shards, npy shards, npy (one file), a png folder (flat, and in subfolders), bmp; 65,536 latents from a text file into
# txt,bmp; one image. Each row gives the whole job's images/s without its start-up (N / (total
# seconds - model load and backend start), from the run's JSON summary), the program's own
# generation rate in that run, the bytes an image takes on disk, the wall time, the cores busy (the
# CPU seconds of the launch and every process under it, over its wall time), the user and system CPU
# time an image took (microseconds, over the same processes and the whole run, start-up included)
# and the threads the program started (rank 0's pool). The ceiling a
# row is held to is the write ceiling that fits it (separate files for shards, the png folder and a
# split bmp; one file for npy and txt) divided by its bytes an image; the row prints that too.
# Every run's outputs are removed after it.
set -u
cd "$(dirname "$0")/.."
prog=${PROG:-build/facegen}
rank_counts=${RANKS:-1}
jobs=" ${JOBS:-tar tar500 npy-u8 npy-shards npy png png-sub bmp mosaic-png txt one} "
bench_write=${BENCH_WRITE:-build/facegen-bench-write}
latents_tool=${LATENTS_TOOL:-build/make-latents}
n=${N:-1048576}
precisions=${PRECISIONS:-fp32 bf16}
device=${DEVICE:-cuda}
[ "$device" = cuda ] || precisions=fp32
for f in "$prog" "$bench_write" "$latents_tool"; do
  [ -x "$f" ] || { echo "job.sh: $f is missing (make all)"; exit 1; }
done
# launch_as RANKS: the program as one process, or as RANKS ranks, into launch=(...).
launch_as() {
  launch=("$prog")
  [ "$1" -gt 1 ] &&
    launch=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$1" --bind-to none "$prog")
  return 0
}
wanted() { [[ $jobs == *" $1 "* ]]; }
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(/dev/shm/facegen-job "${TMPDIR:-/var/tmp}/facegen-job")
py=/usr/bin/python3
[ -x "$py" ] || py=python3

echo "job.sh: $(date -u +%F), $("$prog" --version | head -2 | tr '\n' ' '), $(nproc) cores, rank counts: $rank_counts"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name --format=csv,noheader
text_latents=$(mktemp /tmp/facegen-job-latents.XXXXXX)
"$latents_tool" --count 65536 --seed 3 --output "$text_latents" > /dev/null

# The kernels' rate on this GPU for the default model's architecture at the default batch (512) and at
# 8192, from build/facegen-bench (CUDA only): the rate a run's generation is held to.
kernels_json=
if [ "$device" = cuda ] && [ -x build/facegen-bench ] && [ "${KERNELS:-1}" = 1 ]; then
  kernels_dir=$(mktemp -d /tmp/facegen-job-kernels.XXXXXX)
  if timeout 300 build/facegen-bench --tutorial-only --quick --out "$kernels_dir" > "$kernels_dir/log" 2>&1; then
    kernels_json=$kernels_dir/results.json
    echo "kernels alone (facegen-bench --tutorial-only --quick):"
    grep -E "batch +(512|8192):" "$kernels_dir/log" | sed 's/^/  /'
  else
    echo "facegen-bench failed: $(tail -n 3 "$kernels_dir/log")"
  fi
fi
kernels_rate() {  # kernels_rate PRECISION: images/s at batch 512, or 0
  [ -n "$kernels_json" ] || { echo 0; return; }
  "$py" -c "import json, sys; print(json.load(open(sys.argv[1])).get('tutorial_' + sys.argv[2] + '_b512_kernels', 0))" \
    "$kernels_json" "$1"
}

# timed COMMAND...: runs it; "WALL USER SYSTEM" (seconds; CPU of it and every process it waited for,
# mpirun's ranks included: getrusage(RUSAGE_CHILDREN) of the Python that started it) into $dir/timed.
timed() {
  "$py" - "$dir/timed" "$@" <<'PY'
import resource, subprocess, sys, time
start = time.perf_counter()
status = subprocess.call(sys.argv[2:])
wall = time.perf_counter() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{wall} {used.ru_utime} {used.ru_stime}\n")
sys.exit(status)
PY
}

# row KEY NAME IMAGES CEILING-MB/S ARGS...: one job (if KEY is wanted), its figures on one line
# (gen/kern: the program's generation rate over the kernels' at batch 512, for the precision in $p).
row() {
  local key=$1 name=$2 images=$3 ceiling=$4
  shift 4
  wanted "$key" || return 0
  rm -rf "$dir/out" && mkdir -p "$dir/out"
  if ! timed timeout 900 "${launch[@]}" --device "$device" "$@" --output "$dir/out/r" --summary-json "$dir/summary.json" -q \
       2> "$dir/stderr"; then
    printf '  %-46s FAILED: %s\n' "$name" "$(head -c 200 "$dir/stderr")"
    return
  fi
  local bytes
  bytes=$(du -sb "$dir/out" | cut -f1)
  "$py" - "$dir/summary.json" "$name" "$images" "$bytes" "$ceiling" "$(kernels_rate "$p")" $(cat "$dir/timed") <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
name, images, bytes_, ceiling = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
kernels, wall, user, system = (float(v) for v in sys.argv[6:10])
cpu = user + system
total, load = s["total"]["seconds"], s["load_seconds"]
job = images / max(total - load, 1e-9)
gen = s["stages"]["generate"]["images_per_second"] or 0
per_image = bytes_ / images
cap = ceiling * 1e6 / per_image if ceiling > 0 else float("inf")
bound = min(gen, cap) if gen else cap
gen_share = f"{gen / kernels:>8.2f}" if kernels > 0 else f"{'-':>8}"
print(f"  {name:<46} {job:>11,.0f} {gen:>12,.0f} {gen_share} {per_image:>9,.0f} {cap:>12,.0f} {job / bound:>6.2f}"
      f" {wall:>7.2f} s {cpu / max(wall, 1e-9):>6.1f} {user * 1e6 / images:>7.1f} {system * 1e6 / images:>7.1f}"
      f" {s.get('threads_started', 0):>7}")
PY
  rm -rf "$dir/out"
}

for dir in "${dirs[@]}"; do
  mkdir -p "$dir" || continue
  echo
  echo "== $dir ($(df -T "$dir" | awk 'NR == 2 { print $2 }'))"
  if [[ $dir == /dev/shm/* ]]; then  # pre-fault: the first pages a tmpfs hands out cost more than the rest
    dd if=/dev/zero of="$dir/fault" bs=1M count=8192 status=none; rm -f "$dir/fault"
  fi
  "$bench_write" "$dir" --mib "${CEILING_MIB:-4096}" --writers 1,4,16 --ways files,pwrite --best | tee "$dir/ceilings.txt" |
    sed 's/^/  /'
  files_ceiling=$(sed -n 's/^best files: .* \([0-9]*\) MB\/s$/\1/p' "$dir/ceilings.txt")
  one_ceiling=$(sed -n 's/^best one-file: .* \([0-9]*\) MB\/s$/\1/p' "$dir/ceilings.txt")
  for ranks in $rank_counts; do
    launch_as "$ranks"
    echo "  -- $ranks rank(s)"
    printf '  %-46s %11s %12s %8s %9s %12s %6s %9s %6s %7s %7s %7s\n' job "job img/s" "gen img/s" gen/kern "B/image" \
      "ceiling" ratio wall cores "usr us" "sys us" threads
    for p in $precisions; do
      row tar "$p --random $n -> tar (shards of 10,000)" "$n" "$files_ceiling" --precision "$p" --random "$n" --formats tar
      row tar500 "$p --random $n -> tar (shards of 500)" "$n" "$files_ceiling" --precision "$p" --random "$n" --formats tar \
        --shard-images 500
      row npy-u8 "$p --random $n -> npy-u8, shards of 65,536" "$n" "$files_ceiling" --precision "$p" --random "$n" \
        --formats npy-u8 --shard-images 65536
      row npy-shards "$p --random $n -> npy, shards of 65,536" "$n" "$files_ceiling" --precision "$p" --random "$n" \
        --formats npy --shard-images 65536
      row npy "$p --random $n -> npy (one file)" "$n" "$one_ceiling" --precision "$p" --random "$n" --formats npy
      row png "$p --random $((n / 4)) -> png folder" "$((n / 4))" "$files_ceiling" --precision "$p" --random "$((n / 4))" \
        --formats png
      row png-sub "$p --random $((n / 4)) -> png folder, subfolders" "$((n / 4))" "$files_ceiling" --precision "$p" \
        --random "$((n / 4))" --formats png --png-layout subfolders
      row bmp "$p --random $n -> bmp (split mosaics)" "$n" "$files_ceiling" --precision "$p" --random "$n" --formats bmp
      row mosaic-png "$p --random 65536 -> mosaic-png" 65536 "$files_ceiling" --precision "$p" --random 65536 \
        --formats mosaic-png
      row txt "$p 65,536 text latents -> txt,bmp" 65536 "$one_ceiling" --precision "$p" --input "$text_latents" --formats txt,bmp
      if wanted one; then
        start=$(date +%s%N)
        "${launch[@]}" --device "$device" --precision "$p" --random 1 --output "$dir/one" --formats png -q
        printf '  %-46s wall %d ms\n' "$p one image (--random 1 -> png)" $((($(date +%s%N) - start) / 1000000))
        rm -rf "$dir/one"
      fi
    done
  done
  # What one image cannot beat: a fresh process's bare CUDA context (cudaFree(0)), timed inside it.
  if [ "$device" = cuda ]; then
    "$py" - <<'PY'
import ctypes, glob, time
paths = sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*")) + ["libcudart.so"]
start = time.perf_counter()
runtime = ctypes.CDLL(paths[0])
status = runtime.cudaFree(ctypes.c_void_p(0))
print(f"  {'bare CUDA context (cudaFree(0), fresh process)':<44} wall {(time.perf_counter() - start) * 1000:.0f} ms"
      + ("" if status == 0 else f" (cudaFree returned {status})"))
PY
  fi
done
rm -f "$text_latents"
[ -n "$kernels_json" ] && rm -rf "$(dirname "$kernels_json")"
