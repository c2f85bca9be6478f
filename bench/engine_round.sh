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
#   ONE_IMAGE=1                             first, make run's job (inputs/input1.txt -> txt,bmp) three times:
#                                           the wall time, the summary's start-up parts, a bare context
#   PROFILE="ARGS"                          first, the job `facegen ARGS` under a profile: its user and system
#                                           CPU seconds, the busiest threads by name (/proc samples every 20 ms),
#                                           and perf's report where perf is installed
# Carry .deps (the Debian packages the build needs, ../shared/tools/device-deps.sh): they are unpacked
# only where the build's headers are missing. Logs go to $OUT (default /tmp/facegen-engine).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-engine}
mkdir -p "$out"
. bench/device_packages.sh
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

# profile ARGS...: one run of facegen ARGS (on the GPU) with its threads sampled.
profile() {
  mkdir -p /dev/shm/facegen-profile
  python3 - "$@" <<'PY'
import os, resource, subprocess, sys, time
hz = os.sysconf("SC_CLK_TCK")
cmd = ["build/facegen"] + sys.argv[1:] + ["--output", "/dev/shm/facegen-profile/r", "-q"]
start = time.perf_counter()
p = subprocess.Popen(cmd)
threads = {}
while p.poll() is None:
    try:
        for t in os.listdir(f"/proc/{p.pid}/task"):
            try:
                name = open(f"/proc/{p.pid}/task/{t}/comm").read().strip()
                f = open(f"/proc/{p.pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
                threads[t] = (name, int(f[11]) / hz, int(f[12]) / hz)
            except OSError:
                pass
    except OSError:
        pass
    time.sleep(0.02)
wall = time.perf_counter() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"profile: {' '.join(sys.argv[1:])}: exit {p.returncode}, wall {wall:.2f} s, user {used.ru_utime:.2f} s, "
      f"system {used.ru_stime:.2f} s ({(used.ru_utime + used.ru_stime) / wall:.1f} cores), {len(threads)} threads")
by_name = {}
for name, user, system in threads.values():
    entry = by_name.setdefault(name, [0, 0.0, 0.0])
    entry[0] += 1; entry[1] += user; entry[2] += system
for name, (count, user, system) in sorted(by_name.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
    print(f"  {name:<16} x{count:<3} user {user:6.2f} s  system {system:6.2f} s")
PY
  rm -rf /dev/shm/facegen-profile
}
if [ -n "${PROFILE:-}" ]; then
  # shellcheck disable=SC2086  # PROFILE is a list of arguments
  profile $PROFILE 2>&1 | tee -a "$out/profile.log"
  if command -v perf > /dev/null; then
    mkdir -p /dev/shm/facegen-profile
    # shellcheck disable=SC2086
    perf record -F 499 -g -o "$out/perf.data" -- build/facegen $PROFILE --output /dev/shm/facegen-profile/r -q > /dev/null 2>&1
    perf report -i "$out/perf.data" --stdio --no-children --percent-limit 1.5 2> /dev/null | grep -v '^$' | head -n 120 > "$out/perf.txt"
    head -n 40 "$out/perf.txt"
    rm -rf /dev/shm/facegen-profile "$out/perf.data"
  else
    echo "perf: not installed here"
  fi
fi

if [ "${ONE_IMAGE:-0}" = 1 ]; then
  for try in 1 2 3; do
    t0=$(date +%s%N)
    build/facegen --input inputs/input1.txt --output /dev/shm/facegen-one > "$out/one.txt" 2>&1
    t1=$(date +%s%N)
    echo "make run's job, try $try: wall $(((t1 - t0) / 1000000)) ms; $(grep -E '^total' "$out/one.txt" | sed 's/from start to finished files, //')"
    rm -f /dev/shm/facegen-one.*
  done
  python3 -c "
import ctypes, glob, time
t = time.perf_counter(); r = ctypes.CDLL(sorted(glob.glob('/usr/local/cuda/lib64/libcudart.so*'))[0]); r.cudaFree(ctypes.c_void_p(0))
print(f'bare CUDA context (cudaFree(0), fresh process): {(time.perf_counter() - t) * 1000:.0f} ms')"
fi

[ $# -gt 0 ] || set -- /dev/shm/facegen-job
timeout "${JOB_SECONDS:-420}" bench/job.sh "$@" 2>&1 | tee "$out/job.log"
for dir in "$@"; do rm -rf "$dir"; done
