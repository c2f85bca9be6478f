#!/usr/bin/env bash
# job_profile.sh: where a batch job's host time goes, by thread and by stage, on a machine without perf
# or hardware events (only /proc): for the GPU machine; DEVICE=cpu runs it anywhere, slowly.
#
#   bench/job_profile.sh [DIR...]     default: /dev/shm/facegen-profile (pre-faulted) and the root disk
#   N=1048576 PRECISION=bf16 PROG=build/facegen OUT=/tmp/facegen-profile bench/job_profile.sh
#   DEVICE=synthetic N=20000 PREFAULT_MIB=0 BENCH_MIB=64 BENCH_FILES=4096 bench/job_profile.sh   a quick try
#
# Stages come from differences between variants of one job, each run under bench/thread_times.py
# (CPU by thread name from /proc/PID/task/*/stat, and the exact total of the process):
#   tar           --random N --formats tar: the job
#   tar-nowrite   the same with FACEGEN_PROFILE_SKIP=writes: every file made, no byte written
#   u8            --formats npy-u8 --shard-images 10000: the same pixels, no PNG nor tar member made
#   u8-nowrite    the same without the writes: generation, download and the engine's handling alone
#   tar-direct-on, tar-direct-off   FACEGEN_DIRECT_WRITES=on / off (the same where the file system
#                 takes no O_DIRECT, tmpfs: it says so)
# so that  writing = tar - tar-nowrite,  PNG + tar formatting = tar-nowrite - u8-nowrite,  and the rest
# = u8-nowrite, in wall seconds and user and system microseconds an image. Then the folder of PNGs
# (N / 4 images), flat and in subfolders, with FACEGEN_PNG_WRITERS = 1, 2, 4, 8, 16 threads a run, and
# in subfolders without the writes (FACEGEN_PROFILE_SKIP=writes: created, not written) and without the
# files (=files): images/s and CPU an image; and facegen-bench-write's small-file and O_DIRECT ways in
# each folder. Every run's output is removed after it; logs and each run's thread_times JSON go to
# $OUT (default /tmp/facegen-profile); the table prints last.
set -uo pipefail
cd "$(dirname "$0")/.."
prog=${PROG:-build/facegen}
bench_write=${BENCH_WRITE:-build/facegen-bench-write}
n=${N:-1048576}
precision=${PRECISION:-bf16}
device=${DEVICE:-cuda}
[ "$device" = cuda ] || precision=fp32
out=${OUT:-/tmp/facegen-profile}
prefault_mib=${PREFAULT_MIB:-8192}
bench_mib=${BENCH_MIB:-4096}
bench_files=${BENCH_FILES:-262144}
mkdir -p "$out"
for f in "$prog" "$bench_write"; do [ -x "$f" ] || { echo "job_profile.sh: $f is missing (make all)"; exit 1; }; done
py=/usr/bin/python3
[ -x "$py" ] || py=python3
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(/dev/shm/facegen-profile "${TMPDIR:-/var/tmp}/facegen-profile")
table=$out/table.txt
: > "$table"

echo "job_profile.sh: $(date -u +%F), $("$prog" --version | head -1), $(nproc) cores, N=$n, $precision on $device" | tee -a "$table"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$table"

# variant NAME IMAGES [ENV=VALUE...] -- ARGS...: one run under thread_times.py into $dir/out; its
# figures into $out/NAME-$tag.json and one line of the table.
variant() {
  local name=$1 images=$2 envs=()
  shift 2
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  rm -rf "$dir/out" && mkdir -p "$dir/out"
  local json=$out/$tag-$name.json
  env "${envs[@]}" timeout 900 "$py" bench/thread_times.py --json "$json" "$prog" --device "$device" \
    --precision "$precision" "$@" --output "$dir/out/r" --summary-json "$out/$tag-$name.summary.json" -q \
    > "$out/$tag-$name.log" 2>&1
  local status=$?
  rm -rf "$dir/out"
  if [ $status -ne 0 ]; then
    printf '  %-30s FAILED (exit %d): %s\n' "$name" $status "$(grep -v '^thread_times\|^  ' "$out/$tag-$name.log" | head -c 200)" | tee -a "$table"
    return
  fi
  "$py" - "$json" "$out/$tag-$name.summary.json" "$name" "$images" <<'PY' | tee -a "$table"
import json, sys
t, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
name, images = sys.argv[3], int(sys.argv[4])
job = images / max(s["total"]["seconds"] - s["load_seconds"], 1e-9)
pool = t["by_thread_name"].get("facegen-pool", {"user_seconds": 0, "system_seconds": 0})
print(f"  {name:<30} {job:>11,.0f} {t['wall_seconds']:>7.2f} {t['user_seconds'] * 1e6 / images:>8.2f}"
      f" {t['system_seconds'] * 1e6 / images:>8.2f} {pool['user_seconds'] * 1e6 / images:>9.2f}"
      f" {pool['system_seconds'] * 1e6 / images:>9.2f}")
PY
}
header() {
  printf '  %-30s %11s %7s %8s %8s %9s %9s\n' "$1" "job img/s" "wall s" "usr us" "sys us" "pool usr" "pool sys" | tee -a "$table"
}
# difference A B LABEL: the stage that A has and B lacks, per image (wall per image in us, user, system).
difference() {
  local a=$out/$tag-$1.json b=$out/$tag-$2.json
  [ -f "$a" ] && [ -f "$b" ] || return 0
  "$py" - "$a" "$b" "$3" "$n" <<'PY' | tee -a "$table"
import json, sys
a, b, label, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], int(sys.argv[4])
d = lambda key: (a[key] - b[key]) * 1e6 / n
print(f"    {label:<44} wall {d('wall_seconds'):7.2f} us  user {d('user_seconds'):7.2f} us  system "
      f"{d('system_seconds'):7.2f} us an image")
PY
}

for dir in "${dirs[@]}"; do
  mkdir -p "$dir" || continue
  tag=$(basename "$(dirname "$dir")")-$(basename "$dir")
  tag=${tag//\//}
  fs=$(df -T "$dir" | awk 'NR == 2 { print $2 }')
  echo | tee -a "$table"
  echo "== $dir ($fs)" | tee -a "$table"
  if [[ $dir == /dev/shm/* ]] && [ "$prefault_mib" -gt 0 ]; then  # the first pages a tmpfs hands out cost more
    dd if=/dev/zero of="$dir/fault" bs=1M count="$prefault_mib" status=none; rm -f "$dir/fault"
  fi
  header "$precision --random $n, tar"
  variant tar "$n" -- --random "$n" --formats tar
  variant tar-nowrite "$n" FACEGEN_PROFILE_SKIP=writes -- --random "$n" --formats tar
  variant u8 "$n" -- --random "$n" --formats npy-u8 --shard-images 10000
  variant u8-nowrite "$n" FACEGEN_PROFILE_SKIP=writes -- --random "$n" --formats npy-u8 --shard-images 10000
  variant tar-direct-on "$n" FACEGEN_DIRECT_WRITES=on -- --random "$n" --formats tar
  variant tar-direct-off "$n" FACEGEN_DIRECT_WRITES=off -- --random "$n" --formats tar
  echo "  stages (differences of the runs above):" | tee -a "$table"
  difference tar tar-nowrite "writing the tar shards"
  difference tar-nowrite u8-nowrite "making PNGs and tar members"
  difference u8 u8-nowrite "writing the same pixels as npy-u8"
  difference tar-direct-off tar-direct-on "the page cache's part (off - on)"
  "$bench_write" "$dir" --mib 16 --writers 1 --ways files-direct 2>&1 | grep -q 'not taken' &&
    echo "    (O_DIRECT is not taken in $dir: the direct runs wrote through the page cache)" | tee -a "$table"

  png_n=$((n / 4))
  header "$precision --random $png_n, png folder"
  for layout in flat subfolders; do
    for writers in 1 2 4 8 16; do
      variant "png-$layout-$writers" "$png_n" FACEGEN_PNG_WRITERS=$writers -- --random "$png_n" --formats png \
        --png-layout "$layout"
    done
  done
  variant png-subfolders-nowrite "$png_n" FACEGEN_PROFILE_SKIP=writes -- --random "$png_n" --formats png \
    --png-layout subfolders
  variant png-subfolders-nofiles "$png_n" FACEGEN_PROFILE_SKIP=files -- --random "$png_n" --formats png \
    --png-layout subfolders
  n_saved=$n
  n=$png_n
  echo "  stages (differences of the runs above, png folder in subfolders at the default writers):" | tee -a "$table"
  difference png-subfolders-4 png-subfolders-nowrite "writing the PNGs' bytes"
  difference png-subfolders-nowrite png-subfolders-nofiles "creating and closing the files"
  n=$n_saved

  echo "  facegen-bench-write $dir:" | tee -a "$table"
  "$bench_write" "$dir" --files "$bench_files" --writers 1,4,16 --group 1 --ways pngs-path,pngs-flat,pngs-sub,pngs-own \
    > "$out/$tag-bench-pngs.log" 2>&1
  "$bench_write" "$dir" --files "$bench_files" --writers 16 --group 4 --ways pngs-sub >> "$out/$tag-bench-pngs.log" 2>&1
  "$bench_write" "$dir" --mib "$bench_mib" --writers 1,4,16 --ways files,files-direct,files-bounce,pwrite,pwrite-direct \
    > "$out/$tag-bench-direct.log" 2>&1
  grep -hE '^  (pngs|files|pwrite)|MISMATCH|not taken' "$out/$tag-bench-pngs.log" "$out/$tag-bench-direct.log" |
    sed 's/^/  /' | tee -a "$table"
done
echo
echo "== table (also $table)"
cat "$table"
