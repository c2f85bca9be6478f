#!/usr/bin/env bash
# serve.sh: what `facegen serve` delivers, beside the batch tool on the same machine and model.
#
#   latency      one PNG (GET /v1/images/SEED.png) at concurrency 1: p50 and p99 over REQUESTS requests
#   throughput   images/s at concurrency 1, 8, 64 and 256 with 1, 8 and 64 images per request
#                (POST /v1/generate, format npy-u8 and png for one image), each for SECONDS seconds
#   summary      the one-PNG p50 and p99 and 64 images a request at concurrency 64, on one line for
#                the record
#   protocol     images/s at concurrency 64 with 64 seeds a request over the Open Inference Protocol
#                (POST /v2/models/facegen/infer, binary tensors in and out)
#   memory       the server's resident memory, sampled every second over MEMORY_SECONDS of mixed load
#                (64 clients: 1, 8 or 64 images a request, png, npy-u8, tar and mosaic): the first
#                sample after 5 s of warm-up, the last, and the most
#   batch tool   images/s of `facegen --random N --formats npy-u8` for the same device and model,
#                process start and model load included (as a client of the batch tool pays them)
# Prints a table; records nothing. Runs on a GPU (DEVICE=cuda, the default auto) or the CPU.
#
#   bench/serve.sh [build]     env: DEVICE (auto), MODEL (the shipped faces model), SECONDS_PER_POINT (5),
#                              REQUESTS (500), CONCURRENCY ("1 8 64 256"), IMAGES ("1 8 64"),
#                              BATCH_IMAGES (100000: the batch tool's run), ARGS (more serve flags)
set -u
cd "$(dirname "$0")/.."
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
device=${DEVICE:-auto}
model=${MODEL:-models/facegen-faces.safetensors}
seconds=${SECONDS_PER_POINT:-5}
requests=${REQUESTS:-500}
[ -x "$prog" ] || { echo "bench/serve.sh: $prog is missing (run make)" >&2; exit 1; }
work=$(mktemp -d /tmp/facegen-bench-serve.XXXXXX)
server=
cleanup() {
  [ -n "$server" ] && { kill -TERM "$server" 2> /dev/null; wait "$server" 2> /dev/null; }
  rm -rf "$work"
}
trap cleanup EXIT

(exec env --default-signal "$prog" serve --device "$device" --model "$model" --port 0 ${ARGS:-} 2> "$work/server.err") &
server=$!
port=$(serve_port "$work/server.err" "$server" 60)
[ -n "$port" ] || { echo "bench/serve.sh: the server did not start: $(cat "$work/server.err")" >&2; exit 1; }
head -1 "$work/server.err"
echo "date $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short=12 HEAD 2>/dev/null), device $device, model $model"

/usr/bin/python3 - "$port" "$seconds" "$requests" "${CONCURRENCY:-1 8 64 256}" "${IMAGES:-1 8 64}" <<'PY'
import concurrent.futures, http.client, json, struct, sys, threading, time
port, seconds, requests = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
concurrency = [int(c) for c in sys.argv[4].split()]
images = [int(n) for n in sys.argv[5].split()]

conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
times = []
for k in range(requests):
    start = time.perf_counter()
    conn.request("GET", f"/v1/images/{k}.png")
    res = conn.getresponse()
    res.read()
    assert res.status == 200, res.status
    times.append(time.perf_counter() - start)
times.sort()
print(f"one PNG at concurrency 1: p50 {times[len(times) // 2] * 1e3:.2f} ms, p99 {times[len(times) * 99 // 100] * 1e3:.2f} ms")

def client(n, stop, counts, index):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    seed = index * 10**9
    while not stop.is_set():
        body = json.dumps({"seeds": list(range(seed, seed + n)), "format": "png" if n == 1 else "npy-u8"})
        conn.request("POST", "/v1/generate", body)
        res = conn.getresponse()
        res.read()
        if res.status != 200:
            raise RuntimeError(f"status {res.status}")
        if not stop.is_set():  # a request that ends after the window is not the window's
            counts[index] += n
        seed += n

print("images/s      " + "".join(f"{c:>10}" for c in concurrency) + "   (concurrency)")
for n in images:
    row = []
    for c in concurrency:
        stop, counts = threading.Event(), [0] * c
        with concurrent.futures.ThreadPoolExecutor(c) as pool:
            futures = [pool.submit(client, n, stop, counts, i) for i in range(c)]
            time.sleep(seconds)
            stop.set()
            for f in futures: f.result()
        row.append(sum(counts) / seconds)
    print(f"{n:>3} a request " + "".join(f"{r:>10.0f}" for r in row))
    if n == 64 and 64 in concurrency:
        rate64 = row[concurrency.index(64)]

if 64 in concurrency and 64 in images:
    print(f"summary: one PNG at concurrency 1 p50 {times[len(times) // 2] * 1e3:.2f} ms, p99 {times[len(times) * 99 // 100] * 1e3:.2f} ms; "
          f"64 images a request at concurrency 64: {rate64:.0f} images/s")

def oip_client(stop, counts, index):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    seed = index * 10**9
    while not stop.is_set():
        head = json.dumps({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [64],
                                       "parameters": {"binary_data_size": 512}}],
                           "parameters": {"binary_data_output": True}}).encode()
        body = head + struct.pack("<64Q", *range(seed, seed + 64))
        conn.request("POST", "/v2/models/facegen/infer", body, {"Inference-Header-Content-Length": str(len(head))})
        res = conn.getresponse()
        res.read()
        if res.status != 200:
            raise RuntimeError(f"status {res.status}")
        if not stop.is_set():
            counts[index] += 64
        seed += 64

stop, counts = threading.Event(), [0] * 64
with concurrent.futures.ThreadPoolExecutor(64) as pool:
    futures = [pool.submit(oip_client, stop, counts, i) for i in range(64)]
    time.sleep(seconds)
    stop.set()
    for f in futures: f.result()
print(f"Open Inference Protocol, 64 seeds a request (binary in and out), concurrency 64: {sum(counts) / seconds:.0f} images/s")
PY

if [ "${MEMORY_SECONDS:-60}" != 0 ]; then
/usr/bin/python3 - "$port" "$server" "${MEMORY_SECONDS:-60}" <<'PY'
import concurrent.futures, http.client, json, re, sys, threading, time
port, pid, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))
kinds = [(1, "png"), (8, "npy-u8"), (64, "npy-u8"), (8, "tar"), (16, "mosaic"), (64, "png")]
def client(index, stop, counts):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    seed, k = index * 10**9, index
    while not stop.is_set():
        n, form = kinds[k % len(kinds)]
        body = {"seeds": list(range(seed, seed + n))}
        if not (n == 1 and form == "png"): body["format"] = form
        conn.request("POST", "/v1/generate", json.dumps(body))
        res = conn.getresponse()
        res.read()
        counts[index][0 if res.status == 200 else 1] += 1
        seed, k = seed + n, k + 1
stop, counts, samples = threading.Event(), [[0, 0] for _ in range(64)], []
with concurrent.futures.ThreadPoolExecutor(64) as pool:
    futures = [pool.submit(client, i, stop, counts) for i in range(64)]
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        time.sleep(1)
        samples.append((time.monotonic() - start, rss_kib()))
    stop.set()
    for f in futures: f.result()
warm = [kib for t, kib in samples if t >= 5] or [samples[-1][1]]
answered, refused = sum(c[0] for c in counts), sum(c[1] for c in counts)
print(f"memory over {seconds:.0f} s of mixed load at concurrency 64 ({answered} requests answered, {refused} refused): "
      f"resident {warm[0] / 1024:.1f} MiB after 5 s, {warm[-1] / 1024:.1f} MiB at the end, at most {max(warm) / 1024:.1f} MiB")
print("  every 10 s (MiB): " + " ".join(f"{kib / 1024:.1f}" for t, kib in samples[9::10]))
PY
fi

total=${BATCH_IMAGES:-100000}
start=$(date +%s.%N)
"$prog" --device "$device" --model "$model" --random "$total" --formats npy-u8 --output "$work/batch" --quiet
end=$(date +%s.%N)
echo "batch tool, npy-u8 of $total images: $(awk -v n="$total" -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", n / (b - a) }') images/s (process start and model load included)"
