#!/usr/bin/env bash
# serve_round.sh: one GPU call comparing builds and flags of `facegen serve` side by side, at the load
# where they differ most: 64 clients asking 64 images a request (npy-u8), one PNG at concurrency 1,
# and the Open Inference Protocol; each row is one bench/serve.sh run (the server started afresh).
#
#   bash bench/serve_round.sh "LABEL|BUILD|ARGS" ...   BUILD holds a facegen built with CUDA (carried,
#                                                      or built beforehand); ARGS are serve flags
#   ROUNDS (1)           how many times the whole list runs, in turn, to see the spread between runs
#   SECONDS_PER_POINT, REQUESTS, BATCH_IMAGES, DEVICE, MODEL   passed on to bench/serve.sh (4, 200,
#                                                      20000, cuda, the faces model)
# Each row also samples the server's threads by name (CPU seconds; the busiest thread's busiest
# second). Every row's log goes to $OUT (default /tmp/facegen-serve-round); the summaries to stdout.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/facegen-serve-round}
mkdir -p "$out"
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
echo "scripts at commit $(git rev-parse --short HEAD 2> /dev/null || echo unknown), $(date -u '+%F %H:%M UTC'), $(nproc) cores"
for spec in "$@"; do  # each build's own commit, as it says
  IFS='|' read -r label build _ <<< "$spec"
  echo "$label: $build/facegen, $("$build/facegen" --version 2> /dev/null | grep -oE 'commit [0-9a-f]+(-dirty)?' || echo 'no version')"
done
for round in $(seq 1 "${ROUNDS:-1}"); do
  for spec in "$@"; do
    IFS='|' read -r label build args <<< "$spec"
    log="$out/$round-$label.log"
    CONCURRENCY=64 IMAGES=64 SECONDS_PER_POINT=${SECONDS_PER_POINT:-4} REQUESTS=${REQUESTS:-200} MEMORY_SECONDS=0 \
      BATCH_IMAGES=${BATCH_IMAGES:-20000} DEVICE=${DEVICE:-cuda} ARGS="$args" timeout 120 bash bench/serve.sh "$build" > "$log" 2>&1 &
    bench_pid=$!
    python3 - "$build/facegen" > "$out/$round-$label.threads" 2>&1 <<'PY' &
# The server's threads by name, sampled every 50 ms: CPU seconds over the run, and the busiest
# thread's busiest second (1.00: a thread held for the whole second), to see which stage is full.
import os, subprocess, sys, time
hz, prog = os.sysconf("SC_CLK_TCK"), sys.argv[1]
deadline, pid = time.time() + 30, None
while pid is None and time.time() < deadline:
    found = subprocess.run(["pgrep", "-f", f"^{prog} serve"], capture_output=True, text=True).stdout.split()
    pid = int(found[0]) if found else None
    time.sleep(0.05)
series = {}  # tid -> [(time, cpu seconds)]
names = {}
while pid is not None and os.path.exists(f"/proc/{pid}"):
    now = time.time()
    try: tids = os.listdir(f"/proc/{pid}/task")
    except OSError: break
    for t in tids:
        try:
            names[t] = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            f = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
        except OSError: continue
        series.setdefault(t, []).append((now, (int(f[11]) + int(f[12])) / hz))
    time.sleep(0.05)
def peak(points):
    best, j = 0.0, 0
    for i in range(len(points)):
        while points[i][0] - points[j][0] > 1.0: j += 1
        if points[i][0] - points[j][0] >= 0.9: best = max(best, (points[i][1] - points[j][1]) / (points[i][0] - points[j][0]))
    return best
by_name = {}
for t, points in series.items():
    entry = by_name.setdefault(names.get(t, "?"), [0, 0.0, 0.0])
    entry[0] += 1; entry[1] += points[-1][1]; entry[2] = max(entry[2], peak(points))
print("threads: " + "; ".join(f"{name} x{n} {cpu:.1f} s CPU, busiest {top:.2f}" for name, (n, cpu, top) in
                              sorted(by_name.items(), key=lambda kv: -kv[1][1])))
PY
    wait "$bench_pid"
    wait
    printf '%s %-14s %-40s %s | %s | %s\n' "$round" "$label" "${args:-(defaults)}" \
      "$(grep -m1 '^summary' "$log" | sed 's/^summary: //')" \
      "$(grep -m1 '^Open Inference' "$log" | grep -oE '[0-9]+ images/s' || echo 'OIP: none')" \
      "$(grep -m1 '^batch tool' "$log" | grep -oE '[0-9]+ images/s' || echo 'batch: failed')"
    echo "    $(cat "$out/$round-$label.threads")"
  done
done
