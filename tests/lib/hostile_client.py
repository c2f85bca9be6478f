#!/usr/bin/env python3
"""hostile_client.py: the HTTP side of tests/suites/serve_hostile.sh: a client that tries, against a
running `facegen serve` on 127.0.0.1:PORT (started with --io-timeout-s 2 --idle-timeout-s 3), every
member it can name of each class of request that an HTTP server must refuse or must get right, one
check per line on stdout ("PASS name" or "FAIL name|why"):

  framing     ambiguous or malformed lengths, codings and chunks: 400 (501 for an unknown transfer
              coding, 411 for no length, 413 past the body limit however framed, 415 for a content
              coding), answered at once (under a second once the bytes it needs have come) and the
              connection closed
  head        bare LF or CR, folded lines, bad names and values, request lines, versions, Host; past
              the limits on fields and bytes: 431 (414 for a long request line)
  keep-alive  several requests in turn; pipelined requests (at once, a byte at a time, with a
              refused one among them) answered in order; a half-closed client answered; a GET's body
              never read as a request; Connection: close, HTTP/1.0, HEAD, 100-continue
  form        JSON sent as application/x-www-form-urlencoded (what curl -d sends), at sizes up to the
              limit: read as JSON
  timeouts    a head or a body sent too slowly: 400 after --io-timeout-s; an idle connection, new or
              kept alive: closed after --idle-timeout-s; a client that takes none of its answer: closed
After every refusal the server answers /healthz at once on a new connection; at the end, /metrics
counts the timeouts and the server's memory has not grown by more than 32 MiB (not judged where
SANITIZE=1: AddressSanitizer holds freed memory back on purpose).

  hostile_client.py PORT PID     (PID: the server's, for its resident memory)
  hostile_client.py PORT PID stop   SIGTERM to PID with connections of every kind held (stopping())
Python's standard library only; every read has a deadline."""
import concurrent.futures, gzip, http.client, json, os, re, signal, socket, sys, time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from raw_http import Connection, request  # noqa: E402

port, pid = int(sys.argv[1]), int(sys.argv[2])
IO_TIMEOUT, IDLE_TIMEOUT = 2, 3
MAX_REQUEST_IMAGES = 4096  # serve/request.hpp: kMaxRequestImages


def report(name, ok, why=""):
    print(f"PASS {name}" if ok else f"FAIL {name}|{why}", flush=True)


def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def healthy():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def send_until_answered(conn, data, piece=16384, needed=0):
    """Sends `data` in pieces, stopping early once the server has answered (it refuses heads and
    bodies past their limits before they end) or closed. Returns when the first `needed` bytes had
    been sent (the bytes the server must have before it can answer), or None if it answered sooner."""
    sent_needed = time.monotonic() if needed <= 0 else None
    for at in range(0, len(data), piece):
        try:
            conn.send(data[at:at + piece])
        except OSError:
            return sent_needed
        if sent_needed is None and at + piece >= needed:
            sent_needed = time.monotonic()
        if not conn.nothing_yet():
            return sent_needed
    return sent_needed


def refused(name, data, status, needed=0):
    """`data` on a new connection: answered `status` with a JSON error within a second of the server
    having the bytes it needs to refuse (the first `needed`; a body past the limit must first arrive),
    then closed."""
    conn = Connection(port)
    start = time.monotonic()
    sent_needed = send_until_answered(conn, data if isinstance(data, bytes) else data.encode(), needed=needed)
    answer = conn.answer(timeout=5)
    took = time.monotonic() - (sent_needed or start)
    closed = conn.closed_by_server(timeout=3)
    conn.close()
    try:
        sentence = json.loads(answer.body)["error"] if answer else None
    except ValueError:
        sentence = None
    ok = (answer is not None and answer.status == status and isinstance(sentence, str) and "\n" not in sentence and
          answer.field("connection") == "close" and closed and took < 1.0)
    ok = ok and healthy()
    report(f"{name}: {status} at once, then closed", ok,
           f"answer {answer!r} after {took:.2f} s, closed {closed}, sentence {sentence!r}")


POST = "POST /v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
GET = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
BODY = '{"seeds": [1]}'
CHUNKED = POST + "Transfer-Encoding: chunked\r\n\r\n"


def framing():
    refused("Content-Length and Transfer-Encoding", POST + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)
    refused("Transfer-Encoding and Content-Length", POST + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400)
    refused("two different Content-Lengths", POST + "Content-Length: 14\r\nContent-Length: 13\r\n\r\n" + BODY, 400)
    refused("a Content-Length list of two values", POST + "Content-Length: 14, 13\r\n\r\n" + BODY, 400)
    for value in ["+14", "14a", "-14", "", "0xe", "1.4e1", "1 4", "14,"]:
        refused(f"Content-Length '{value}'", POST + f"Content-Length: {value}\r\n\r\n" + BODY, 400)
    for coding in ["chunked, chunked", "chunked, gzip", "gzip", "identity"]:
        refused(f"Transfer-Encoding '{coding}'", POST + f"Transfer-Encoding: {coding}\r\n\r\n0\r\n\r\n", 400)
    refused("Transfer-Encoding twice", POST + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)
    refused("Transfer-Encoding in HTTP/1.0", "POST /v1/generate HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)
    for size in ["-1", "-e", "0x3", "+3", "ffffffffffffffffffff", "", " 3", "3g", "3 3"]:
        refused(f"chunk size '{size}'", CHUNKED + f"{size}\r\nabc\r\n0\r\n\r\n", 400)
    refused("a bare LF after a chunk size", CHUNKED + "3\nabc\r\n0\r\n\r\n", 400)
    refused("chunk data longer than its size", CHUNKED + "3\r\nabcd\r\n0\r\n\r\n", 400)
    refused("a bare LF after chunk data", CHUNKED + "3\r\nabc\n0\r\n\r\n", 400)
    refused("a bare LF in the trailer", CHUNKED + "3\r\nabc\r\n0\r\nT: v\n\r\n", 400)
    for coding in ["gzip, chunked", "x-custom, chunked", "deflate,chunked"]:
        refused(f"the unknown transfer coding '{coding}'", POST + f"Transfer-Encoding: {coding}\r\n\r\n0\r\n\r\n", 501)
    refused("a POST without a length", POST + "\r\n" + BODY, 411)
    refused("a PUT without a length", "PUT /v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 411)
    refused("a body announced past 32 MiB", POST + f"Content-Length: {(32 << 20) + 1}\r\n\r\n", 413)
    refused("a body announced past 2^64", POST + "Content-Length: 99999999999999999999999\r\n\r\n", 413)
    refused("a chunk past 32 MiB", CHUNKED + "2000001\r\nabc", 413)
    mib = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"
    # The server may refuse once the 33rd chunk's size line has come: its time counts from there.
    refused("chunks of 1 MiB summing past 32 MiB", CHUNKED.encode() + mib * 33, 413, needed=len(CHUNKED) + 32 * len(mib) + 8)
    bomb = gzip.compress(b" " * (64 << 20), 9)
    refused(f"a gzip Content-Encoding ({len(bomb) >> 10} KiB that inflate to 64 MiB)",
            (POST + f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n").encode() + bomb, 415)
    refused("Content-Encoding 'identity, br'", POST + "Content-Encoding: identity, br\r\nContent-Length: 14\r\n\r\n" + BODY, 415)
    refused("an expectation other than 100-continue", POST + "Expect: 200-ok\r\nContent-Length: 14\r\n\r\n" + BODY, 417)


def heads():
    refused("bare LF line ends", "GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\n", 400)
    refused("a bare LF on one header line", GET + "X-A: b\n\r\n", 400)
    refused("a bare LF ending the head", GET + "\n", 400)
    refused("a bare CR", "GET /healthz HTTP/1.1\rHost: 127.0.0.1\r\n\r\n", 400)
    refused("a folded header line (space)", GET + "X-A: b\r\n c\r\n\r\n", 400)
    refused("a folded header line (tab)", GET + "X-A: b\r\n\tc\r\n\r\n", 400)
    refused("white space before the first field", "GET /healthz HTTP/1.1\r\n Host: 127.0.0.1\r\n\r\n", 400)
    refused("white space before a field's colon", GET + "X-A : b\r\n\r\n", 400)
    refused("an empty field name", GET + ": b\r\n\r\n", 400)
    refused("a header line without a colon", GET + "X-A b\r\n\r\n", 400)
    refused("a NUL in a field value", GET + "X-A: a\x00b\r\n\r\n", 400)
    refused("a DEL in a field value", GET + "X-A: a\x7fb\r\n\r\n", 400)
    refused("two spaces in the request line", "GET  /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400)
    refused("a space in the target", "GET /heal thz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400)
    refused("a request line of HTTP/0.9", "GET /healthz\r\n\r\n", 400)
    refused("a lower-case version", "GET /healthz http/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400)
    refused("a target that is not a path", "GET healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400)
    refused("a target with a raw non-ASCII byte", b"GET /h\xc3\xa9 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400)
    refused("a method that is not a token", "G(T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400)
    refused("more than two empty lines before the request", "\r\n\r\n\r\n" + GET + "\r\n", 400)
    refused("HTTP/1.1 without Host", "GET /healthz HTTP/1.1\r\n\r\n", 400)
    refused("two Hosts", GET + "Host: other\r\n\r\n", 400)
    refused("HTTP/2.0 in a request line", "GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505)
    refused("HTTP/1.2", "GET /healthz HTTP/1.2\r\nHost: 127.0.0.1\r\n\r\n", 505)
    refused("101 header fields", GET + "".join(f"X-{k}: v\r\n" for k in range(100)) + "\r\n", 431)
    refused("100,000 header fields", GET + "".join(f"X-{k}: v\r\n" for k in range(100000)) + "\r\n", 431)
    refused("one field of 20 KiB", GET + "X-Big: " + "v" * (20 << 10) + "\r\n\r\n", 431)
    refused("a request line of 9 KiB", "GET /" + "a" * (9 << 10) + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 414)
    # Every shape of bad request line, its CRLF the last byte sent: refused at once, not waited on.
    for line, status in [("GET /healthz", 400), ("GET", 400), ("GET ", 400), ("GET  /healthz HTTP/1.1", 400),
                         (" GET /healthz HTTP/1.1", 400), ("GET /healthz HTTP/1.1 ", 400), ("GET /a b HTTP/1.1", 400),
                         ("G(T /healthz HTTP/1.1", 400), ("GET healthz HTTP/1.1", 400), ("GET /h\xc3\xa9 HTTP/1.1", 400),
                         ("GET /healthz http/1.1", 400), ("GET /healthz HTTP/1", 400), ("GET /healthz HTTP/2.0", 505),
                         ("GET /healthz HTTP/0.9", 505)]:
        refused(f"the request line {line!r} alone, nothing after its CRLF", line.encode("latin-1") + b"\r\n", status)
    conn = Connection(port)
    conn.send("GET /healthz HTTP/1.1\r\nHost: 1")
    conn.half_close()
    answer = conn.answer(timeout=5)
    report("a client that closes mid-head: 400, then closed", answer is not None and answer.status == 400 and conn.closed_by_server(3),
           f"{answer!r}")
    conn.close()


def utf8_bodies():
    """Request bytes that are not UTF-8 (or UTF-8 cut short) in every place they reach an answer: the
    path, the query, the seed of an image, a model's name, the values of the fields the server reads;
    each answer's body is JSON text (UTF-8) with one sentence, and its head is ASCII."""
    cases = [
        ("an unknown path of %ff%fe", request("GET", "/%ff%fe")),
        ("an unknown path cut in a character", request("GET", "/%c3")),
        # decoded, the 79th and 80th bytes of the path are one character, across the 80 a sentence shows
        ("a long unknown path, a character across the cut", request("GET", "/" + "a" * 78 + "%c3%a9%c3%a9")),
        ("an image named %ff", request("GET", "/v1/images/%ff")),
        ("an image's seed of %ff", request("GET", "/v1/images/%ff.png")),
        ("a seed list of %ff", request("GET", "/v1/latents?seeds=%ff")),
        ("a seed list of 1,%c3%28", request("GET", "/v1/latents?seeds=1,%c3%28")),
        ("a model named %ff", request("POST", "/v2/models/%ff/infer", "{}")),
        ("a model named %ed%a0%80 (a surrogate)", request("GET", "/v2/models/%ed%a0%80")),
        ("a wrong method on a path of %ff", request("DELETE", "/v1/images/%ff.png")),
        ("Content-Length 1\\xff", POST.encode() + b"Content-Length: 1\xff\r\n\r\n"),
        ("Transfer-Encoding \\xff, chunked", POST.encode() + b"Transfer-Encoding: \xff, chunked\r\n\r\n0\r\n\r\n"),
        ("Content-Encoding \\xfe\\xff", POST.encode() + b"Content-Encoding: \xfe\xff\r\nContent-Length: 14\r\n\r\n" + BODY.encode()),
        ("Expect \\xff", POST.encode() + b"Expect: \xff\r\nContent-Length: 14\r\n\r\n" + BODY.encode()),
        ("Inference-Header-Content-Length \\xff", b"POST /v2/models/facegen/infer HTTP/1.1\r\nHost: x\r\nInference-Header-Content-Length: \xff\r\n"
         b"Content-Length: 2\r\n\r\n{}"),
        ("a JSON body of raw \\xff", request("POST", "/v1/generate", b'{"seeds": \xff[1]}')),
        ("a JSON member name of raw \\xff", request("POST", "/v1/generate", b'{"\xff": 1}')),
        ("a JSON string of raw \\xc3 cut", request("POST", "/v1/generate", b'{"seeds": [1], "format": "\xc3"}')),
    ]
    for name, data in cases:
        conn = Connection(port)
        conn.send(data)
        answer = conn.answer(timeout=10)
        conn.close()
        why = f"answer {answer!r}"
        ok = answer is not None and answer.status >= 400
        if ok:
            try:
                sentence = json.loads(answer.body.decode("utf-8"))["error"]
                ok = isinstance(sentence, str) and "\n" not in sentence
            except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
                ok, why = False, f"{why}: the body is not JSON text: {e}"
            ok = ok and all(32 <= ord(c) < 127 or c == "\t" for v in answer.fields.values() for c in v)
        report(f"{name}: {answer.status if answer else 'no answer'}, the body JSON text, the head ASCII", ok, why)


def expect_answers(name, conn, wanted, then_closed=False, timeout=10):
    """The next answers on conn have the statuses and (where given) bodies in `wanted`, in order."""
    got = []
    for status, body in wanted:
        answer = conn.answer(timeout=timeout)
        got.append(answer)
        if answer is None or answer.status != status or (body is not None and answer.body != body):
            report(name, False, f"answer {len(got)}: {answer!r}, wanted {status}")
            return False
    end = conn.closed_by_server(timeout=3) if then_closed else conn.quiet_for(0.5)
    report(name, end, f"after the answers the connection was {'not closed' if then_closed else 'closed or spoke'}")
    return end


def keep_alive():
    health = b'{"status": "ok"}\n'
    conn = Connection(port)
    for k in range(5):
        conn.send(request("GET", "/healthz"))
        answer = conn.answer()
        if answer is None or answer.status != 200:
            break
    report("5 requests in turn on one connection", answer is not None and answer.status == 200 and conn.quiet_for(0.3), f"{answer!r}")
    conn.close()

    # Pipelined: 12 latents (each its own seed), healthz between, sent at once; compared with the
    # answers of the same requests asked one at a time.
    paths = []
    for k in range(12):
        paths += [f"/v1/latents?seeds={k}", "/healthz"]
    single = []
    for path in paths:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", path)
        single.append(c.getresponse().read())
        c.close()
    conn = Connection(port)
    conn.send(b"".join(request("GET", p) for p in paths))
    expect_answers("24 pipelined requests sent at once: answered in order", conn, [(200, b) for b in single])
    conn.close()
    conn = Connection(port)
    conn.send_slowly(b"".join(request("GET", p) for p in paths[:4]), 0)
    expect_answers("4 pipelined requests sent a byte at a time: answered in order", conn, [(200, b) for b in single[:4]])
    conn.close()
    conn = Connection(port)
    conn.send(request("GET", paths[0]) + b"GET /healthz HTTP/1.1\nHost: x\n\n" + request("GET", paths[2]))
    expect_answers("pipelined, a malformed request between two good ones: 200, 400, then closed", conn,
                   [(200, single[0]), (400, None)], then_closed=True)
    conn.close()
    conn = Connection(port)
    conn.send(request("POST", "/v1/generate", BODY) + request("GET", "/healthz") + request("POST", "/v1/generate", '{"seeds": [2]}'))
    png1 = http_get("/v1/images/1.png")
    png2 = http_get("/v1/images/2.png")
    expect_answers("pipelined generate, healthz, generate: answered in order", conn, [(200, png1), (200, health), (200, png2)])
    conn.close()

    conn = Connection(port)
    conn.send(request("GET", "/healthz"))
    conn.half_close()
    expect_answers("a client that half-closes after its request: answered, then closed", conn, [(200, health)], then_closed=True)
    conn.close()
    conn = Connection(port)
    conn.send(request("POST", "/v1/generate", BODY) + request("GET", paths[0]) + request("GET", "/healthz"))
    conn.half_close()
    expect_answers("a client that half-closes after 3 pipelined requests: all answered, then closed", conn,
                   [(200, png1), (200, single[0]), (200, health)], then_closed=True)
    conn.close()
    conn = Connection(port)
    conn.send(POST + "Content-Length: 14\r\n\r\n" + BODY[:5])
    conn.half_close()
    expect_answers("a client that half-closes mid-body: 400, then closed", conn, [(400, None)], then_closed=True)
    conn.close()

    inner = request("GET", "/metrics")
    conn = Connection(port)
    conn.send(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(inner)}\r\n\r\n".encode() + inner)
    expect_answers("a GET whose body holds a request: one answer, the body never read as a request", conn, [(200, health)])
    conn.close()

    conn = Connection(port)
    conn.send(request("GET", "/healthz", fields={"Connection": "close"}))
    answer = conn.answer()
    report("Connection: close: answered with Connection: close, then closed",
           answer is not None and answer.field("connection") == "close" and conn.closed_by_server(3), f"{answer!r}")
    conn.close()
    conn = Connection(port)
    conn.send("GET /healthz HTTP/1.0\r\n\r\n")
    answer = conn.answer()
    report("HTTP/1.0: answered as HTTP/1.0, then closed", answer is not None and answer.version == "HTTP/1.0" and
           answer.status == 200 and conn.closed_by_server(3), f"{answer!r}")
    conn.close()
    conn = Connection(port)
    conn.send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    expect_answers("HTTP/1.0 with keep-alive: two answers, the connection kept", conn, [(200, health), (200, health)])
    conn.close()
    conn = Connection(port)
    conn.send(request("HEAD", "/healthz") + request("GET", "/healthz"))
    head = conn.answer(head_only=True)
    report("HEAD: the head alone, with the GET's Content-Length; the next request still read",
           head is not None and head.field("content-length") == str(len(health)) and conn.answer() is not None, f"{head!r}")
    conn.close()
    conn = Connection(port)
    conn.send("GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n\r\n" + GET + "\r\n")
    expect_answers("a target in absolute form, then a request after an empty line", conn, [(200, health), (200, health)])
    conn.close()
    conn = Connection(port)
    conn.send(POST + "Expect: 100-continue\r\nContent-Length: 14\r\n\r\n")
    interim = conn.answer(timeout=2)
    conn.send(BODY)
    final = conn.answer()
    report("Expect: 100-continue: 100 Continue, then the answer to the body",
           interim is not None and interim.status == 100 and final is not None and final.body == png1, f"{interim!r} {final!r}")
    conn.close()


def http_get(path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    body = conn.getresponse().read()
    conn.close()
    return body


def form_json():
    png1 = http_get("/v1/images/1.png")
    for size in [14, (8 << 10) + 1, 1 << 20, (32 << 20) - 64]:
        body = '{"seeds": [1]' + " " * max(0, size - 14) + "}"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/generate", body, {"Content-Type": "application/x-www-form-urlencoded"})
        res = conn.getresponse()
        got = res.read()
        conn.close()
        report(f"JSON sent as a form, {len(body)} bytes: read as JSON", res.status == 200 and got == png1, f"{res.status} {got[:100]!r}")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/generate", '{"seeds": [1' + " " * 20000, {"Content-Type": "application/x-www-form-urlencoded"})
    res = conn.getresponse()
    got = res.read()
    report("malformed JSON sent as a form: 400 and the JSON's sentence", res.status == 400 and b"malformed at byte" in got, f"{res.status} {got[:200]!r}")


def timed(name, start, answer, closed, low, high, status):
    took = time.monotonic() - start
    ok = closed and low <= took <= high and (answer.status == status if status else answer is None)
    report(f"{name} (took {took:.1f} s)", ok, f"answer {answer!r}, closed {closed}, after {took:.1f} s (want {low}-{high} s)")


def slow_head():
    conn = Connection(port)
    start = time.monotonic()
    data = (GET + "X-Slow: " + "v" * 40 + "\r\n\r\n").encode()
    answer = None
    for k in range(len(data)):
        try:
            conn.send(data[k:k + 1])
        except OSError:
            break
        answer = conn.answer(timeout=0.4)
        if answer is not None or conn.closed:
            break
    closed = conn.closed_by_server(3)
    timed(f"a head sent a byte every 0.4 s: 400 after --io-timeout-s {IO_TIMEOUT}, then closed", start, answer, closed,
          IO_TIMEOUT - 0.2, IO_TIMEOUT + 1.5, 400)
    conn.close()


def slow_body():
    conn = Connection(port)
    conn.send(POST + "Content-Length: 100\r\n\r\n" + BODY[:5])
    start = time.monotonic()
    answer = conn.answer(timeout=IO_TIMEOUT + 4)
    timed(f"a body that stalls: 400 after --io-timeout-s {IO_TIMEOUT}, then closed", start, answer, conn.closed_by_server(3),
          IO_TIMEOUT - 0.2, IO_TIMEOUT + 1.5, 400)
    conn.close()


def idle_new():
    conn = Connection(port)
    start = time.monotonic()
    closed = conn.closed_by_server(IDLE_TIMEOUT + 4)
    timed(f"a new connection that sends nothing: closed after --idle-timeout-s {IDLE_TIMEOUT}", start, None, closed,
          IDLE_TIMEOUT - 0.2, IDLE_TIMEOUT + 1.5, None)
    conn.close()


def idle_kept():
    conn = Connection(port)
    conn.send(request("GET", "/healthz"))
    conn.answer()
    start = time.monotonic()
    closed = conn.closed_by_server(IDLE_TIMEOUT + 4)
    timed(f"a kept-alive connection with no next request: closed after --idle-timeout-s {IDLE_TIMEOUT}", start, None, closed,
          IDLE_TIMEOUT - 0.2, IDLE_TIMEOUT + 1.5, None)
    conn.close()


def reads_nothing():
    """A client that asks for 5 MB of latents (no images: quick on any build) and takes none of
    them: closed once no byte is taken for --io-timeout-s; meanwhile others are answered."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request("GET", "/v1/latents?seeds=0-4095"))
    start = time.monotonic()
    before = metric("facegen_connections_timed_out_total", '{phase="write"}')
    while metric("facegen_connections_timed_out_total", '{phase="write"}') == before and time.monotonic() - start < 30:
        time.sleep(0.2)
    took = time.monotonic() - start
    got = 0
    sock.settimeout(2)
    try:
        while True:
            data = sock.recv(1 << 20)
            if not data:
                break
            got += len(data)
    except OSError:
        pass
    sock.close()
    report(f"a client that takes none of a 5 MB answer: closed after the write timeout (after {took:.1f} s, "
           f"{got >> 10} KiB taken)", took < 30 and got < 5 << 20, f"after {took:.1f} s, {got} bytes")


def exited(timeout):
    """The seconds until the server's process ends (a zombie counts: the suite reaps it), or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return time.monotonic() - start
        except (OSError, IndexError):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def requests_in_flight(images):
    """On connections of their own: a request of `images` images (npy-u8), and 3 pipelined requests,
    the first of `images` images too."""
    in_flight = Connection(port)
    in_flight.send(request("POST", "/v1/generate", '{"seeds": [%s], "format": "npy-u8"}' % ", ".join(str(k) for k in range(100, 100 + images))))
    pipelined = Connection(port)
    seeds = ", ".join(str(k) for k in range(100000, 100000 + images))
    pipelined.send(request("POST", "/v1/generate", '{"seeds": [%s], "format": "npy-u8"}' % seeds) +
                   request("GET", "/healthz") + request("GET", "/healthz"))
    return in_flight, pipelined


def whole_npy(answer, images):
    """Whether `answer` is a 200 whose body is the npy-u8 file of `images` 64x64 images, all of it."""
    body = answer.body if answer is not None and answer.status == 200 else b""
    return body[:6] == b"\x93NUMPY" and len(body) == 10 + body[8] + 256 * body[9] + images * 12288


def stopping():
    """SIGTERM with a connection of each kind held: the idle ones (new, kept alive) close at once; a
    request's head or body not whole is answered 503 at once and closed; a request being made is
    answered (Connection: close), as is the first of pipelined ones (the rest are not read); a slow
    reader of a large answer gets all of it at its own pace; the process exits once they are done."""
    # Requests that keep the server's one worker busy for about 3 s, so that they are still being
    # made at the signal whatever the speed of the machine (the service interleaves requests, so a
    # small one would not wait behind a large one): timed on 16 images once the server is warm (its
    # first request pays for its start); sent again, larger, while they were answered within 0.3 s.
    per_image = 0.0
    for _ in range(2):
        start = time.monotonic()
        timing = Connection(port)
        timing.send(request("POST", "/v1/generate", '{"seeds": [%s], "format": "npy-u8"}' % ", ".join(str(k) for k in range(16))))
        timing.answer(timeout=60)
        timing.close()
        per_image = (time.monotonic() - start) / 16
    images = max(16, min(MAX_REQUEST_IMAGES, int(1.5 / max(per_image, 1e-6))))
    for attempt in range(3):
        in_flight, pipelined = requests_in_flight(images)
        time.sleep(0.3)  # in the server's hands
        if in_flight.nothing_yet() and pipelined.nothing_yet():
            break
        print(f"INFO requests of {images} images were answered within 0.3 s: sent again, larger", flush=True)
        in_flight.close()
        pipelined.close()
        images = min(4 * images, MAX_REQUEST_IMAGES)
    idle_new = Connection(port)
    idle_kept = Connection(port)
    idle_kept.send(request("GET", "/healthz"))
    idle_kept.answer()
    stalled_head = Connection(port)
    stalled_head.send("GET /healthz HTTP/1.1\r\nHost: 1")
    stalled_body = Connection(port)
    stalled_body.send(POST + "Content-Length: 100\r\n\r\n" + BODY[:5])
    reader = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    reader.settimeout(10)
    reader.connect(("127.0.0.1", port))
    reader.sendall(request("GET", "/v1/latents?seeds=0-2047"))
    got = reader.recv(16384)
    time.sleep(0.3)  # every connection in its state
    made_at_signal = in_flight.nothing_yet() and pipelined.nothing_yet()
    os.kill(pid, signal.SIGTERM)
    signalled = time.monotonic()
    for name, conn in [("a new connection that sent nothing", idle_new), ("a kept-alive connection between requests", idle_kept)]:
        closed = conn.closed_by_server(timeout=2)
        took = time.monotonic() - signalled
        report(f"SIGTERM: {name} is closed at once (after {took:.2f} s)", closed and took < 0.5, f"closed {closed} after {took:.2f} s")
        conn.close()
    for name, conn in [("a request's head not whole", stalled_head), ("a request's body not whole", stalled_body)]:
        answer = conn.answer(timeout=2)
        closed = conn.closed_by_server(timeout=2)
        took = time.monotonic() - signalled
        report(f"SIGTERM: {name}: 503 and closed at once (after {took:.2f} s)", answer is not None and answer.status == 503 and closed and took < 0.5,
               f"answer {answer!r}, closed {closed} after {took:.2f} s")
        conn.close()
    # Both read at once: a client that takes neither for --io-timeout-s would rightly be dropped.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        ends = [pool.submit(lambda conn: (conn.answer(60), conn.closed_by_server(3)), conn) for conn in (in_flight, pipelined)]
        (made, made_closed), (first, first_closed) = ends[0].result(), ends[1].result()
    report(f"SIGTERM: a request being made ({images} images) is answered whole, with Connection: close, then closed",
           made_at_signal and whole_npy(made, images) and made.field("connection") == "close" and made_closed,
           f"not yet answered at the signal {made_at_signal}, answer {made!r}, fields {made.fields if made else None}")
    report("SIGTERM: of 3 pipelined requests the one being made is answered whole (Connection: close), then closed",
           made_at_signal and whole_npy(first, images) and first.field("connection") == "close" and first_closed,
           f"not yet answered at the signal {made_at_signal}, answer {first!r}, fields {first.fields if first else None}")
    in_flight.close()
    pipelined.close()
    while True:  # about 1 MB/s
        try:
            data = reader.recv(16384)
        except OSError:
            break
        if not data:
            break
        got += data
        time.sleep(0.01)
    reader.close()
    read_all = time.monotonic() - signalled
    head, _, body = got.partition(b"\r\n\r\n")
    length = re.search(rb"Content-Length: (\d+)", head)
    whole = length is not None and len(body) == int(length.group(1)) and body.endswith(b"]]}\n")
    report(f"SIGTERM: a slow reader of a {len(got) >> 10} KiB answer gets all of it (by {read_all:.1f} s)", whole, f"{len(body)} bytes, head {head[:200]!r}")
    took = exited(15)
    report(f"SIGTERM: the process exits once they are done ({took:.2f} s after the last)" if took is not None else "SIGTERM: the process exits",
           took is not None and took < 1.5, f"after {took} s")


def metric(name, labels=""):
    text = http_get("/metrics").decode()
    m = re.search("^" + re.escape(name + labels) + r" ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


if __name__ == "__main__" and sys.argv[3:] == ["stop"]:
    stopping()
elif __name__ == "__main__":
    rss_before = rss_kib()
    timed_out = {phase: metric("facegen_connections_timed_out_total", f'{{phase="{phase}"}}') for phase in ("idle", "head", "body")}
    with concurrent.futures.ThreadPoolExecutor(5) as pool:  # the waits of the timeouts, beside the rest
        waits = [pool.submit(f) for f in (slow_head, slow_body, idle_new, idle_kept, reads_nothing)]
        framing()
        heads()
        keep_alive()
        form_json()
        utf8_bodies()
        for f in waits:
            f.result()
    after = {phase: metric("facegen_connections_timed_out_total", f'{{phase="{phase}"}}') for phase in ("idle", "head", "body")}
    report("/metrics counts the connections closed by each timeout", after["idle"] >= timed_out["idle"] + 2 and
           after["head"] >= timed_out["head"] + 1 and after["body"] >= timed_out["body"] + 1, f"before {timed_out}, after {after}")
    growth = (rss_kib() - rss_before) / 1024
    if os.environ.get("SANITIZE") == "1":
        print(f"INFO the server's memory over every case grew {growth:.1f} MiB (AddressSanitizer's quarantine: not judged)", flush=True)
    else:
        report(f"the server's memory over every case grew {growth:.1f} MiB (< 32)", growth < 32, f"{growth:.1f} MiB")
