#!/usr/bin/env python3
"""load_client.py: the client side of tests/suites/serve_load.sh, against `facegen serve` on
127.0.0.1:PORT started with --max-connections LIMIT and idle and io timeouts of TIMEOUT seconds.
One check per line ("PASS name", "FAIL name|why") and the figures measured ("INFO ...").

  load_client.py PORT PID LIMIT TIMEOUT HELD SECONDS

  1. the rate of a 64-client load (8 images a request, npy-u8, kept-alive connections) for SECONDS,
     with a /healthz probe on a new connection every 20 ms beside it (its p50, p99)
  2. HELD connections opened and held by another process: half silent, half sending a request's
     head a byte a second; nothing refused (the server is under its limit)
  3. connections filled up to LIMIT, then 200 more, one at a time: each answered 503 within 10 ms,
     while a connection opened before keeps being answered within 10 ms
  4. the probe alone: p99 within 10 ms (or within the noise it shows alone before anything is held);
     then the load and the probe again: the rate keeps 0.75 of the rate without the held
     connections (the slower of 1 and 6; the ratio is printed), the probe's p99 stays within
     25 ms (or twice what the probe shows without them, plus 5 ms), the server's resident memory grows
     less than 200 MB
  5. every held connection closed by its timeout: the silent ones after TIMEOUT s (nothing sent to
     them), the dripping ones answered 400 after TIMEOUT s from their first byte; /metrics counts them
  6. the load without held connections again
The load, the probe and the held connections run in separate processes, so that no one's Python
holds up another's. Every wait has a deadline; every process ends by itself."""
import http.client, json, multiprocessing, os, re, resource, selectors, socket, sys, threading, time

port, pid, limit, timeout, held, seconds = (int(v) for v in sys.argv[1:7])
HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: " + b"d" * 200


def report(name, ok, why=""):
    print(f"PASS {name}" if ok else f"FAIL {name}|{why}", flush=True)


def info(text):
    print(f"INFO {text}", flush=True)


def rss_mib():
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1)) / 1024


def metric(name, labels=""):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    m = re.search("^" + re.escape(name + labels) + r" ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def raise_open_files():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# --- the load: 64 clients, each on its own kept-alive connection -----------------------------------
def load_process(seconds, out):
    os.nice(10)  # see loaded_window
    stop, counts, failures = threading.Event(), [0] * 64, []

    def client(index):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        seed = index * 10**6
        while not stop.is_set():
            conn.request("POST", "/v1/generate", json.dumps({"seeds": list(range(seed, seed + 8)), "format": "npy-u8"}))
            res = conn.getresponse()
            res.read()
            if res.status != 200:
                failures.append(res.status)
                return
            counts[index] += 8
            seed += 8

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(64)]
    for t in threads:
        t.start()
    time.sleep(1)  # every client past its first request
    start_count, start = sum(counts), time.monotonic()
    time.sleep(seconds)
    rate = (sum(counts) - start_count) / (time.monotonic() - start)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    out.put((rate, failures[:5]))


# --- the probe: /healthz on a new connection every 20 ms -------------------------------------------
def probe_process(seconds, out):
    times, bad = [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/healthz")
            res = conn.getresponse()
            res.read()
            conn.close()
            if res.status != 200:
                bad.append(res.status)
        except OSError as e:
            bad.append(repr(e))
        times.append(time.perf_counter() - start)
        time.sleep(0.02)
    out.put((times, bad[:5]))


def probe_alone(seconds):
    """The probe's times with nothing else running."""
    probes = multiprocessing.Queue()
    alone = multiprocessing.Process(target=probe_process, args=(seconds, probes))
    alone.start()
    times, bad = probes.get(timeout=60)
    alone.join(30)
    return times, bad


def loaded_window(seconds):
    """The load's rate and the probe's times over the same window, with the server's peak memory.
    The load and the held connections stand for clients on other machines: their processes run at
    a lower priority (nice 10), so that on this machine's two CPUs they do not take the server's and
    the probe's turn (without it, the probe's p99 measured its own wait for a CPU)."""
    results = multiprocessing.Queue()
    probes = multiprocessing.Queue()
    load = multiprocessing.Process(target=load_process, args=(seconds, results))
    probe = multiprocessing.Process(target=probe_process, args=(seconds + 1, probes))
    load.start()
    probe.start()
    peak = 0
    end = time.monotonic() + seconds + 2
    while time.monotonic() < end:
        peak = max(peak, rss_mib())
        time.sleep(0.25)
    rate, failures = results.get(timeout=120)
    times, bad = probes.get(timeout=60)
    load.join(60)
    probe.join(60)
    return rate, failures, times, bad, peak


# --- the held connections --------------------------------------------------------------------------
def hold_process(count, timeout, ready, out):
    """Opens `count` connections (even: silent; odd: a request's head, a byte a second each, their
    bytes spread evenly over each second as independent clients' would be), says how many opened,
    then watches each until the server closes it (deadline: timeout + 20 s), and reports how long
    each lived from its connect (silent) or its first byte (dripping)."""
    raise_open_files()
    os.nice(10)  # see loaded_window
    sel = selectors.DefaultSelector()
    socks, began, data_of, lived = [], [], {}, {}
    for k in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        began.append(time.monotonic())
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
        if k % 500 == 499:
            time.sleep(0.05)  # let the server accept: the kernel's queue of new connections is finite
    pending = set(range(count))
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        for k in list(pending):
            try:
                socks[k].getpeername()
                pending.discard(k)
            except OSError:
                if socks[k].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    pending.discard(k)
        time.sleep(0.05)
    for k, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, k)
    ready.put(count - len(pending))
    drippers = list(range(1, count, 2))
    start = time.monotonic()
    sent = 0  # drip sends made, in order: dripper (sent % n), byte (sent // n)
    end = start + timeout + 20
    while len(lived) < count and time.monotonic() < end:
        due = min(int((time.monotonic() - start) * len(drippers)), len(drippers) * len(HEAD))
        while sent < due:
            k, byte = drippers[sent % len(drippers)], sent // len(drippers)
            if byte == 0:
                began[k] = time.monotonic()
            if k not in lived:
                try:
                    socks[k].send(HEAD[byte:byte + 1])
                except OSError:
                    pass
            sent += 1
        for key, _ in sel.select(timeout=0.01):
            k = key.data
            try:
                data = socks[k].recv(65536)
            except OSError:
                data = b""
            if data:
                data_of[k] = data_of.get(k, b"") + data
                continue
            lived[k] = time.monotonic() - began[k]
            sel.unregister(socks[k])
            socks[k].close()
    silent = [lived[k] for k in range(0, count, 2) if k in lived and k not in data_of]
    dripped = [lived[k] for k in drippers if k in lived and data_of.get(k, b"").startswith(b"HTTP/1.1 400 ")]
    refused = sum(1 for data in data_of.values() if data.startswith(b"HTTP/1.1 503"))
    out.put({"opened": count - len(pending), "silent_closed": len(silent), "dripped_400": len(dripped), "refused": refused,
             "open_at_end": count - len(lived), "silent_times": (min(silent or [0]), max(silent or [0])),
             "drip_times": (min(dripped or [0]), max(dripped or [0]))})


def healthz_on_new_connection():
    """(status, socket) of GET /healthz on a new connection, the socket left open."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        more = s.recv(4096)
        if not more:
            break
        data += more
    return (int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0), s


def refusals_past_the_limit():
    """Fills the server up to its limit (new connections until one is answered 503), then asks 200
    times more: 503 within 10 ms each; a connection from before keeps its answers within 10 ms."""
    raise_open_files()
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    kept.request("GET", "/healthz")
    kept.getresponse().read()
    fill = []
    for _ in range(limit):  # a few hundred, at most
        status, s = healthz_on_new_connection()
        fill.append(s)
        if status == 503:
            break
    refused_times, wrong, kept_times = [], [], []
    for k in range(200):
        start = time.perf_counter()
        status, s = healthz_on_new_connection()
        refused_times.append(time.perf_counter() - start)
        s.close()
        if status != 503:
            wrong.append(status)
        if k % 5 == 0:
            start = time.perf_counter()
            kept.request("GET", "/healthz")
            ok = kept.getresponse().read() == b'{"status": "ok"}\n'
            kept_times.append(time.perf_counter() - start if ok else 99)
    for s in fill:
        s.close()
    kept.close()
    return refused_times, wrong, kept_times


def main():
    raise_open_files()
    loaded_window(1)  # warm: the model's first batches, the allocator, the threads
    rss_before = rss_mib()
    quiet_a, _ = probe_alone(3)
    rate_a1, failures_a1, probe_a1, _, _ = loaded_window(seconds)
    info(f"without held connections: {rate_a1:.0f} images/s (64 clients, 8 a request); /healthz p50 "
         f"{percentile(probe_a1, 0.5) * 1e3:.2f} ms, p99 {percentile(probe_a1, 0.99) * 1e3:.2f} ms over {len(probe_a1)} probes; "
         f"resident {rss_before:.0f} MiB")
    refused_before = metric("facegen_connections_refused_total")
    timed_out_before = {p: metric("facegen_connections_timed_out_total", f'{{phase="{p}"}}') for p in ("idle", "head")}

    ready, holder_out = multiprocessing.Queue(), multiprocessing.Queue()
    holder = multiprocessing.Process(target=hold_process, args=(held, timeout, ready, holder_out))
    start = time.monotonic()
    holder.start()
    opened = ready.get(timeout=60)
    took = time.monotonic() - start
    open_now = metric("facegen_connections_open")
    report(f"{held} connections opened and held (in {took:.1f} s): the server holds {open_now:.0f}",
           opened == held and open_now >= held, f"opened {opened}, the server holds {open_now}")
    rss_held = rss_mib()
    refused_after = metric("facegen_connections_refused_total")
    report("nothing refused under the limit", refused_after == refused_before, f"refused {refused_before} -> {refused_after}")

    refused_times, wrong, kept_times = refusals_past_the_limit()
    info(f"past --max-connections {limit}: 503 p50 {percentile(refused_times, 0.5) * 1e3:.2f} ms, p99 "
         f"{percentile(refused_times, 0.99) * 1e3:.2f} ms, max {max(refused_times) * 1e3:.2f} ms; a kept connection's /healthz "
         f"meanwhile p50 {percentile(kept_times, 0.5) * 1e3:.2f} ms, max {max(kept_times) * 1e3:.2f} ms")
    # Judged at p99 and p90: on a shared machine one sample in a hundred may wait for a CPU.
    report("past --max-connections: 200 new connections all answered 503, at p99 within 10 ms",
           not wrong and percentile(refused_times, 0.99) <= 0.010, f"wrong {wrong[:3]}, p99 {percentile(refused_times, 0.99) * 1e3:.2f} ms")
    report("past --max-connections: a connection from before answered meanwhile, at p90 within 10 ms",
           percentile(kept_times, 0.9) <= 0.010, f"{[round(t * 1e3, 2) for t in kept_times]}")

    quiet_b, bad_quiet = probe_alone(3)
    p99_quiet_a, p99_quiet_b = percentile(quiet_a, 0.99) * 1e3, percentile(quiet_b, 0.99) * 1e3
    info(f"no load: /healthz p50 {percentile(quiet_a, 0.5) * 1e3:.2f} ms, p99 {p99_quiet_a:.2f} ms with nothing held; "
         f"p50 {percentile(quiet_b, 0.5) * 1e3:.2f} ms, p99 {p99_quiet_b:.2f} ms with {held} held")
    report(f"/healthz p99 {p99_quiet_b:.2f} ms with {held} connections held (<= 10, or <= 1.25 x {p99_quiet_a:.2f} + 2 without them)",
           (p99_quiet_b <= 10 or p99_quiet_b <= 1.25 * p99_quiet_a + 2) and not bad_quiet, f"bad {bad_quiet}")

    rate_b, failures_b, probe_b, bad_b, peak = loaded_window(seconds)
    p99_b = percentile(probe_b, 0.99) * 1e3
    info(f"with {held} held (half silent, half a byte a second): {rate_b:.0f} images/s; /healthz p50 "
         f"{percentile(probe_b, 0.5) * 1e3:.2f} ms, p99 {p99_b:.2f} ms, max {max(probe_b) * 1e3:.2f} ms over {len(probe_b)} probes; "
         f"resident {rss_held:.0f} MiB held, {peak:.0f} MiB at most under load")
    growth = peak - rss_before
    report(f"resident memory {growth:.0f} MiB above the unloaded figure (<= 200 MB)", growth * 1.048576 <= 200, f"{rss_before:.0f} -> {peak:.0f} MiB")

    result = holder_out.get(timeout=timeout + 40)
    holder.join(30)
    silent_lo, silent_hi = result["silent_times"]
    drip_lo, drip_hi = result["drip_times"]
    info(f"held connections closed: {result['silent_closed']} silent after {silent_lo:.1f}-{silent_hi:.1f} s, "
         f"{result['dripped_400']} dripping answered 400 after {drip_lo:.1f}-{drip_hi:.1f} s; {result['open_at_end']} left open")
    half = held // 2
    report(f"every silent connection closed by --idle-timeout-s {timeout} ({silent_lo:.1f}-{silent_hi:.1f} s)",
           result["silent_closed"] == half and timeout - 0.5 <= silent_lo and silent_hi <= timeout + 5, str(result))
    report(f"every dripping connection answered 400 by --io-timeout-s {timeout} ({drip_lo:.1f}-{drip_hi:.1f} s)",
           result["dripped_400"] == held - half and timeout - 0.5 <= drip_lo and drip_hi <= timeout + 5 and result["refused"] == 0, str(result))
    timed_out = {p: metric("facegen_connections_timed_out_total", f'{{phase="{p}"}}') - timed_out_before[p] for p in ("idle", "head")}
    report(f"/metrics counts them: {timed_out['idle']:.0f} idle, {timed_out['head']:.0f} head", timed_out["idle"] >= half and
           timed_out["head"] >= held - half, str(timed_out))
    info(f"resident after every connection closed: {rss_mib():.0f} MiB; open now {metric('facegen_connections_open'):.0f}")

    # The rate without them again, after. A shared machine's other work moves the rate by a third
    # over a minute (measured: 187, then 241 images/s, nothing held either time), so the held window
    # is judged against the slower of the windows around it, and only for starving the load (below
    # 0.75 of it: connections that took a thread, or a loop that spun); the ratio is the figure, which
    # is measured, not gated (the 2026-11-27 CI run, the build machine busy compiling beside it: 0.86).
    rate_a2, failures_a2, probe_a2, _, _ = loaded_window(seconds)
    rate_a = min(rate_a1, rate_a2)
    info(f"without held connections again: {rate_a2:.0f} images/s; /healthz p99 {percentile(probe_a2, 0.99) * 1e3:.2f} ms")
    report(f"the 64-client load keeps {rate_b / rate_a:.2f} of its rate (>= 0.75) with {held} connections held",
           rate_b >= 0.75 * rate_a and not (failures_a1 or failures_b or failures_a2),
           f"{rate_a1:.0f}, {rate_b:.0f}, {rate_a2:.0f} images/s; failures {failures_a1} {failures_b} {failures_a2}")
    # On this machine's two CPUs the load's generating takes one whole; the probe's tail is then the
    # scheduler's as much as the server's (10.8 ms against 4.9 ms without them in one CI-like run,
    # the suite alone), and it is judged for starving, not for speed: within 25 ms, or within twice
    # the same probe's p99 without the held connections plus 5 ms. A loop the held connections
    # blocked would keep the probe waiting for their bytes, a second apart.
    p99_a = max(percentile(probe_a1, 0.99), percentile(probe_a2, 0.99)) * 1e3
    report(f"/healthz p99 {p99_b:.2f} ms with {held} connections held and the load (<= 25, or <= 2 x {p99_a:.2f} + 5 without them)",
           (p99_b <= 25 or p99_b <= 2 * p99_a + 5) and not bad_b, f"bad {bad_b}")


if __name__ == "__main__":
    main()
