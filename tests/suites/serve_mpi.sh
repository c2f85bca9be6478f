#!/usr/bin/env bash
# serve_mpi.sh: the service over the ranks of an MPI job on this machine (run_parallel.sh --serve,
# 2 ranks, CPU backend): rank 0 listens and counts a worker per rank; 64 images in batches of at most
# 4, over both ranks, hold the batch tool's bytes, and so do 8 requests at once; SIGTERM to the
# launcher while a request of 1,024 images is in flight (its first batch made): the request is
# answered in full, then the job exits 0 within seconds and frees the port. The launcher starts with
# default signal dispositions and is killed at the end even when a check fails. Usage: serve_mpi.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh serve_mpi
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "serve_mpi: $prog or $model is missing (run make test)"; exit 1; }
command -v mpirun > /dev/null || skip_suite "no mpirun (OpenMPI)"
"$prog" --version | grep -q '^  MPI   yes' || skip_suite "facegen built without MPI"
py=/usr/bin/python3
work=$(mktemp -d /tmp/facegen-serve-mpi.XXXXXX)
job=
cleanup() {
  if [ -n "$job" ]; then
    kill -TERM "$job" 2> /dev/null
    for _ in $(seq 50); do kill -0 "$job" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$job" 2> /dev/null
    wait "$job" 2> /dev/null
  fi
  rm -rf "$work"
}
on_exit cleanup

echo "the service over 2 MPI ranks:"
(exec env --default-signal ./run_parallel.sh --serve --ranks-per-node 2 --model "$model" --program "$prog" -- \
   --device cpu --threads 1 --port 0 --max-batch 4 --max-delay-ms 1 > "$work/job.out" 2> "$work/job.err") &
job=$!
port=$(serve_port "$work/job.err" "$job" 60)
if [ -z "$port" ]; then
  fail "the job starts and rank 0 listens" "$(head -c 400 "$work/job.err")"
  suite_end
  exit
fi
ready=$(curl -s --max-time 30 "http://127.0.0.1:$port/readyz")
if [ "$ready" = '{"status": "ready", "workers": 2}' ]; then pass "rank 0 listens with a worker per rank"; else fail "/readyz" "$ready"; fi

"$prog" --device cpu --model "$model" --seeds 0-63 --formats npy-u8 --quiet --output "$work/batch" || exit 1
verdict=$($py - "$port" "$work/batch.u8.npy" <<'PY' 2>&1
import concurrent.futures, http.client, json, sys
port, want = int(sys.argv[1]), open(sys.argv[2], "rb").read()
header = want[:128]
def ask(seeds):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/generate", json.dumps({"seeds": seeds, "format": "npy-u8"}))
    res = conn.getresponse()
    return res.status, res.read()
status, got = ask(list(range(64)))
print("whole", "ok" if status == 200 and got == want else f"status {status}, {len(got)} bytes")
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    answers = list(pool.map(lambda k: ask(list(range(8 * k, 8 * k + 8))), range(8)))
image = 64 * 64 * 3
right = sum(status == 200 and got[-8 * image:] == want[128 + 8 * k * image:128 + 8 * (k + 1) * image]
            for k, (status, got) in enumerate(answers))
print("parts", "ok" if right == 8 else f"{right} of 8 right")
PY
)
if echo "$verdict" | grep -q '^whole ok$'; then pass "64 images over both ranks in batches of 4: the batch tool's bytes"; else fail "64 images" "$verdict"; fi
if echo "$verdict" | grep -q '^parts ok$'; then pass "8 requests at once: each its own images"; else fail "8 requests at once" "$verdict"; fi
batches=$(curl -s --max-time 30 "http://127.0.0.1:$port/metrics" | grep '^facegen_batch_images_count{model="facegen"} ' | cut -d' ' -f2)
if [ "${batches:-0}" -ge 16 ]; then pass "batches of at most 4: $batches of them"; else fail "batches" "${batches:-none}"; fi

# SIGTERM with a request in flight: the client says INFLIGHT once a batch of its request is made
# (/metrics counts one more batch), then reads the answer.
timeout 120 $py tests/lib/serve_client.py "$port" "$work" "$model" "$prog" inflight 1024 > "$work/inflight.out" 2>&1 &
client=$!
for _ in $(seq 300); do grep -q INFLIGHT "$work/inflight.out" && break; kill -0 "$client" 2> /dev/null || break; sleep 0.05; done
kill -TERM "$job"
wait_pid "$job" 30
status=$?
wait_pid "$client" 30
if [ $status = 0 ] && grep -q '^INFLIGHT$' "$work/inflight.out" && grep -q "^RESULT 200 $((128 + 1024 * 64 * 64 * 3))$" "$work/inflight.out" &&
   grep -q 'stopped' "$work/job.err" && ! curl -s --max-time 5 "http://127.0.0.1:$port/healthz" > /dev/null; then
  pass "SIGTERM to the launcher with 1,024 images in flight: answered in full, then exit 0 and the port freed"
  job=
else
  [ $status = 124 ] || job=
  fail "SIGTERM with a request in flight" "launcher status $status; client: $(tr '\n' ' ' < "$work/inflight.out" | head -c 300); job: $(tail -n 3 "$work/job.err")"
fi
suite_end
