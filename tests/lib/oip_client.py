#!/usr/bin/env python3
"""oip_client.py: a client of the Open Inference Protocol (KServe v2 / Triton HTTP/REST, with the
binary tensor data extension), written from the protocol's documents and Python's standard library
alone (http.client, json, struct), against `facegen serve` on 127.0.0.1:PORT. One check per line:
"PASS name" or "FAIL name|why".

  oip_client.py PORT WORK MODEL PROG     PROG: the batch tool, whose npy-u8 pixels the answers must equal

  health     /v2/health/live and /ready, /v2/models/facegen/ready (and under /versions/1): 200
  metadata   /v2: the server's name, version and the binary_tensor_data extension; the model's
             metadata: latents FP32 [-1, nz] or seeds UINT64 [-1] in, images UINT8 [-1, 64, 64, 3] out
  inference  seeds and latents, each as JSON (flat and nested) and as binary data, the output as JSON
             and as binary: exactly the pixels of `facegen --formats npy-u8` for the same seeds or
             latents (read by it from a .npy); the request's id comes back
  refusals   every kind of bad tensor (datatype, shape, size, data, JSON, the binary part, the
             inputs): 400 and {"error": "one sentence"}; an unknown model: 404
  oip_client.py PORT WORK MODEL PROG models MODEL2
             a server of two models, faces=MODEL (the default) and fashion=MODEL2, as Triton's clients
             and perf_analyzer see it: /v2/repository/index (both READY; {"ready": true}; a bad body
             400), each model's metadata, /config (Triton's ModelConfig: batched, dims without the
             batch's, the instance group) and /stats (inference and execution counts that grow by what
             was asked, the success and queue durations), /v2/models/stats of both; inference by name
             with the batch tool's pixels of that model; an unknown model or version 404 naming the
             models; /v1/models, and /v1/models/NAME/images/SEED.png as the batch tool's seed-named
             PNG of that model, with an ETag per model (If-None-Match, weak or in a list: 304 with no
             body), immutable, while /v1/images/SEED.png (the default's) is no-cache and names its
             URL in Content-Location; a tar answer's json names the model file and its XXH3-128;
             /metrics' build and model information
SERVE_DEVICE (default cpu): the batch tool's device, as the server's."""
import http.client, io, json, os, random, struct, subprocess, sys, tarfile

port, work, model, prog = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
mode = sys.argv[5] if len(sys.argv) > 5 else "protocol"
device = os.environ.get("SERVE_DEVICE", "cpu")
IMAGE = 64 * 64 * 3


def report(name, ok, why=""):
    print(f"PASS {name}" if ok else f"FAIL {name}|{why}", flush=True)


def call(method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
    finally:
        conn.close()


def infer(request, binary=b"", path="/v2/models/facegen/infer"):
    """POST an inference request: JSON alone, or JSON then `binary` with the extension's header.
    Returns (status, the answer's JSON, the binary part of the answer)."""
    text = json.dumps(request).encode()
    headers = {"Content-Type": "application/json"}
    if binary:
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(text))}
    status, fields, body = call("POST", path, text + binary, headers)
    length = int(fields.get("inference-header-content-length", len(body)))
    try:
        answer = json.loads(body[:length])
    except ValueError:
        answer = None
    return status, answer, body[length:]


def pixels_of(answer, binary):
    """The images output's bytes: its JSON data, or the binary part that its binary_data_size names."""
    output = answer["outputs"][0]
    if "data" in output:
        return bytes(output["data"])
    return binary[:output["parameters"]["binary_data_size"]]


def read_npy(path):
    """(shape, data bytes) of a NumPy 1.0 or 2.0 file."""
    with open(path, "rb") as f:
        raw = f.read()
    major = raw[6]
    header_len, start = (struct.unpack("<H", raw[8:10])[0], 10) if major == 1 else (struct.unpack("<I", raw[8:12])[0], 12)
    header = raw[start:start + header_len].decode("latin-1")
    shape = tuple(int(v) for v in header.split("'shape': (")[1].split(")")[0].split(",") if v.strip())
    return shape, raw[start + header_len:]


def write_npy_f32(path, rows):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (len(rows), len(rows[0]))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        for row in rows:
            f.write(struct.pack(f"<{len(row)}f", *row))


def batch_pixels(name, *args):
    out = f"{work}/{name}"
    subprocess.run([prog, "--device", device, "--model", model, "--quiet", "--formats", "npy-u8", "--output", out, *args],
                   check=True, timeout=120)
    return read_npy(out + ".u8.npy")[1]


def health_and_metadata():
    for path in ["/v2/health/live", "/v2/health/ready", "/v2/models/facegen/ready", "/v2/models/facegen/versions/1/ready"]:
        status, _, body = call("GET", path)
        report(f"GET {path}: 200", status == 200, f"{status} {body[:100]!r}")
    status, _, body = call("GET", "/v2")
    server = json.loads(body) if status == 200 else {}
    report("GET /v2: the server's name, version and extensions", server.get("name") == "facegen" and "version" in server and
           "binary_tensor_data" in server.get("extensions", []), f"{status} {body[:200]!r}")
    status, _, body = call("GET", "/v2/models/facegen")
    meta = json.loads(body) if status == 200 else {}
    inputs = {i["name"]: (i["datatype"], i["shape"]) for i in meta.get("inputs", [])}
    outputs = {o["name"]: (o["datatype"], o["shape"]) for o in meta.get("outputs", [])}
    nz = inputs.get("latents", ("", [0, 0]))[1][1]
    report("GET /v2/models/facegen: latents FP32 [-1, nz] or seeds UINT64 [-1] in, images UINT8 [-1, 64, 64, 3] out",
           meta.get("name") == "facegen" and inputs == {"latents": ("FP32", [-1, nz]), "seeds": ("UINT64", [-1])} and
           outputs == {"images": ("UINT8", [-1, 64, 64, 3])}, f"{status} {body[:300]!r}")
    status, _, body = call("GET", "/v2/models/facegen/versions/1")
    report("GET /v2/models/facegen/versions/1: the same metadata", status == 200 and json.loads(body) == meta, f"{status}")
    status, _, body = call("GET", "/v2/models/other")
    report("an unknown model: 404 and one sentence", status == 404 and "facegen" in json.loads(body)["error"], f"{status} {body!r}")
    return nz


def seeds_tensor(seeds, binary=False):
    tensor = {"name": "seeds", "datatype": "UINT64", "shape": [len(seeds)]}
    if binary:
        tensor["parameters"] = {"binary_data_size": 8 * len(seeds)}
        return tensor, struct.pack(f"<{len(seeds)}Q", *seeds)
    tensor["data"] = seeds
    return tensor, b""


def latents_tensor(rows, binary=False, nested=True):
    tensor = {"name": "latents", "datatype": "FP32", "shape": [len(rows), len(rows[0])]}
    if binary:
        tensor["parameters"] = {"binary_data_size": 4 * len(rows) * len(rows[0])}
        return tensor, b"".join(struct.pack(f"<{len(r)}f", *r) for r in rows)
    tensor["data"] = rows if nested else [v for r in rows for v in r]
    return tensor, b""


def identity(nz):
    seeds = [3, 1, 4, 1, 5, 18446744073709551615]
    want = batch_pixels("seeds", "--seeds", ",".join(map(str, seeds)))
    for binary_in in (False, True):
        for binary_out in (False, True):
            tensor, raw = seeds_tensor(seeds, binary_in)
            request = {"id": "req-7", "inputs": [tensor]}
            if binary_out:
                request["outputs"] = [{"name": "images", "parameters": {"binary_data": True}}]
            status, answer, binary = infer(request, raw)
            got = pixels_of(answer, binary) if status == 200 else b""
            shape = answer["outputs"][0]["shape"] if status == 200 else None
            report(f"seeds as {'binary' if binary_in else 'JSON'}, images as {'binary' if binary_out else 'JSON'}: "
                   "the batch tool's npy-u8 pixels", status == 200 and got == want and shape == [len(seeds), 64, 64, 3] and
                   answer.get("id") == "req-7" and answer.get("model_name") == "facegen", f"{status} {str(answer)[:200]}")
    rng = random.Random(38)
    rows = [[rng.gauss(0, 1) for _ in range(nz)] for _ in range(5)]
    rows = [list(struct.unpack(f"<{nz}f", struct.pack(f"<{nz}f", *r))) for r in rows]  # exactly float32
    write_npy_f32(f"{work}/latents.npy", rows)
    want = batch_pixels("latents", "--input", f"{work}/latents.npy")
    for name, binary_in, nested in [("nested JSON", False, True), ("flat JSON", False, False), ("binary", True, True)]:
        tensor, raw = latents_tensor(rows, binary_in, nested)
        status, answer, binary = infer({"inputs": [tensor], "parameters": {"binary_data_output": True}}, raw)
        got = pixels_of(answer, binary) if status == 200 else b""
        report(f"latents as {name}: the batch tool's npy-u8 pixels", status == 200 and got == want, f"{status} {str(answer)[:200]}")
    tensor, raw = latents_tensor(rows[:1])
    status, answer, binary = infer({"inputs": [tensor]}, raw, "/v2/models/facegen/versions/1/infer")
    report("inference under /versions/1", status == 200 and pixels_of(answer, binary) == want[:IMAGE], f"{status}")


def refusals(nz):
    good = {"name": "seeds", "datatype": "UINT64", "shape": [2], "data": [1, 2]}
    cases = [
        ("malformed JSON", b'{"inputs": [', {}),
        ("not an object", b"[1, 2]", {}),
        ("no inputs", {}, None),
        ("two inputs", {"inputs": [good, good]}, None),
        ("an unknown input", {"inputs": [dict(good, name="noise")]}, None),
        ("seeds as INT64", {"inputs": [dict(good, datatype="INT64")]}, None),
        ("seeds as FP32", {"inputs": [dict(good, datatype="FP32")]}, None),
        ("latents as FP64", {"inputs": [{"name": "latents", "datatype": "FP64", "shape": [1, nz], "data": [0.0] * nz}]}, None),
        ("latents of the wrong length", {"inputs": [{"name": "latents", "datatype": "FP32", "shape": [1, nz - 1], "data": [0.0] * (nz - 1)}]}, None),
        ("latents of rank 1", {"inputs": [{"name": "latents", "datatype": "FP32", "shape": [nz], "data": [0.0] * nz}]}, None),
        ("seeds of rank 2", {"inputs": [dict(good, shape=[2, 1], data=[[1], [2]])]}, None),
        ("a negative dimension", {"inputs": [dict(good, shape=[-1])]}, None),
        ("no images", {"inputs": [dict(good, shape=[0], data=[])]}, None),
        ("4,097 images", {"inputs": [dict(good, shape=[4097], data=list(range(4097)))]}, None),
        ("fewer values than the shape", {"inputs": [dict(good, data=[1])]}, None),
        ("more values than the shape", {"inputs": [dict(good, data=[1, 2, 3])]}, None),
        ("a nested array that does not match the shape", {"inputs": [{"name": "latents", "datatype": "FP32", "shape": [2, nz], "data": [[0.0] * nz, [0.0] * (nz - 1)]}]}, None),
        ("a string among the values", {"inputs": [dict(good, data=[1, "2"])]}, None),
        ("a seed past 2^64", {"inputs": [dict(good, data=[1, 18446744073709551616])]}, None),
        ("a fractional seed", {"inputs": [dict(good, data=[1, 2.5])]}, None),
        ("a latent too large for FP32", {"inputs": [{"name": "latents", "datatype": "FP32", "shape": [1, nz], "data": [1e39] * nz}]}, None),
        ("neither data nor binary", {"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [2]}]}, None),
        ("an unknown output", {"inputs": [good], "outputs": [{"name": "latents"}]}, None),
        ("an unknown member", {"inputs": [good], "model": "x"}, None),
    ]
    for name, request, _ in cases:
        if isinstance(request, bytes):
            status, _, body = call("POST", "/v2/models/facegen/infer", request)
        else:
            status, _, body = call("POST", "/v2/models/facegen/infer", json.dumps(request).encode())
        check_refusal(name, status, body)
    tensor, raw = seeds_tensor([1, 2], binary=True)
    text = json.dumps({"inputs": [tensor]}).encode()
    binary_cases = [
        ("binary data one byte short", text + raw[:-1], str(len(text))),
        ("binary data one byte long", text + raw + b"x", str(len(text))),
        ("binary data without Inference-Header-Content-Length", text + raw, None),
        ("Inference-Header-Content-Length past the body", text + raw, str(len(text) + 100)),
        ("Inference-Header-Content-Length that is not a number", text + raw, "x12"),
        ("Inference-Header-Content-Length cutting the JSON", text + raw, str(len(text) - 3)),
    ]
    for name, body, length in binary_cases:
        headers = {"Content-Type": "application/octet-stream"}
        if length is not None:
            headers["Inference-Header-Content-Length"] = length
        status, _, answer = call("POST", "/v2/models/facegen/infer", body, headers)
        check_refusal(name, status, answer)
    wrong = dict(tensor, parameters={"binary_data_size": 15})
    text = json.dumps({"inputs": [wrong]}).encode()
    status, _, answer = call("POST", "/v2/models/facegen/infer", text + raw[:15],
                             {"Inference-Header-Content-Length": str(len(text))})
    check_refusal("a binary_data_size that is not the shape's", status, answer)
    nan = {"name": "latents", "datatype": "FP32", "shape": [1, nz], "parameters": {"binary_data_size": 4 * nz}}
    text = json.dumps({"inputs": [nan]}).encode()
    status, _, answer = call("POST", "/v2/models/facegen/infer", text + struct.pack(f"<{nz}f", *([float("nan")] * nz)),
                             {"Inference-Header-Content-Length": str(len(text))})
    check_refusal("binary latents holding NaN", status, answer)
    status, _, answer = call("GET", "/v2/models/facegen/infer")
    report("GET on infer: 405 and one sentence", status == 405 and "error" in json.loads(answer), f"{status} {answer!r}")


def check_refusal(name, status, body):
    try:
        sentence = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        sentence = None
    report(f"{name}: 400 and {{\"error\": ...}}", status == 400 and isinstance(sentence, str) and sentence and "\n" not in sentence,
           f"{status} {body[:200]!r}")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def batch_file(model_path, name, *args):
    """A file the batch tool writes with `model_path`: its bytes."""
    out = f"{work}/{name}"
    subprocess.run([prog, "--device", device, "--model", model_path, "--quiet", "--output", out, *args], check=True, timeout=120)
    return out


def repository_and_config(names):
    status, _, body = call("POST", "/v2/repository/index", b"")
    index = json.loads(body) if status == 200 else []
    report("POST /v2/repository/index: every model, version 1, READY",
           [(m["name"], m["version"], m["state"]) for m in index] == [(n, "1", "READY") for n in names], f"{status} {body[:300]!r}")
    status, _, body = call("POST", "/v2/repository/index", b'{"ready": true}')
    report('POST /v2/repository/index {"ready": true}: the ready ones, all of them',
           status == 200 and [m["name"] for m in json.loads(body)] == names, f"{status} {body[:200]!r}")
    status, _, body = call("POST", "/v2/repository/index", b'{"ready": "yes"}')
    check_refusal('/v2/repository/index with "ready": "yes"', status, body)
    for name in names:
        status, _, body = call("GET", f"/v2/models/{name}")
        meta = json.loads(body) if status == 200 else {}
        report(f"GET /v2/models/{name}: its own metadata", meta.get("name") == name, f"{status} {body[:200]!r}")
        for path in [f"/v2/models/{name}/config", f"/v2/models/{name}/versions/1/config"]:
            status, _, body = call("GET", path)
            config = json.loads(body) if status == 200 else {}
            inputs = {i["name"]: (i["data_type"], i["dims"]) for i in config.get("input", [])}
            outputs = {o["name"]: (o["data_type"], o["dims"]) for o in config.get("output", [])}
            group = (config.get("instance_group") or [{}])[0]
            report(f"GET {path}: Triton's ModelConfig of a batched model",
                   config.get("name") == name and config.get("max_batch_size") == 4096 and
                   inputs == {"latents": ("TYPE_FP32", [meta["inputs"][0]["shape"][1]]), "seeds": ("TYPE_UINT64", [1])} and
                   outputs == {"images": ("TYPE_UINT8", [64, 64, 3])} and
                   group.get("kind") in ("KIND_CPU", "KIND_GPU") and group.get("count", 0) >= 1 and
                   "max_queue_delay_microseconds" in config.get("dynamic_batching", {}), f"{status} {body[:400]!r}")
    for path, want in [("/v2/models/cats", "faces, fashion"), ("/v2/models/fashion/versions/2/infer", "version 1"),
                       ("/v1/models/cats/images/1.png", "faces, fashion")]:
        status, _, body = call("GET", path)
        report(f"GET {path}: 404 naming what there is", status == 404 and want in json.loads(body)["error"], f"{status} {body!r}")


def stats_grow(names):
    def stat_of(name):
        status, _, body = call("GET", f"/v2/models/{name}/stats")
        stats = json.loads(body)["model_stats"] if status == 200 else []
        return stats[0] if len(stats) == 1 and stats[0]["name"] == name and stats[0]["version"] == "1" else None
    before = {name: stat_of(name) for name in names}
    tensor = {"name": "seeds", "datatype": "UINT64", "shape": [3], "data": [4, 5, 6]}
    status, answer, _ = infer({"inputs": [tensor]}, path="/v2/models/fashion/infer")
    after = {name: stat_of(name) for name in names}
    ok = status == 200 and answer.get("model_name") == "fashion" and None not in before.values() and None not in after.values()
    if ok:
        b, a = before["fashion"], after["fashion"]
        ok = (a["inference_count"] == b["inference_count"] + 3 and a["execution_count"] >= b["execution_count"] + 1 and
              a["inference_stats"]["success"]["count"] == b["inference_stats"]["success"]["count"] + 1 and
              a["inference_stats"]["success"]["ns"] > b["inference_stats"]["success"]["ns"] and
              a["inference_stats"]["queue"]["count"] >= b["inference_stats"]["queue"]["count"] + 1 and
              a["last_inference"] > 0 and sum(s["compute_infer"]["count"] for s in a["batch_stats"]) == a["execution_count"] and
              after["faces"]["inference_count"] == before["faces"]["inference_count"])
    report("GET /v2/models/NAME/stats: an inference of 3 images by fashion counts 3 there, none in faces", ok,
           f"{status} {answer!r} before {before} after {after}")
    status, _, body = call("GET", "/v2/models/stats")
    report("GET /v2/models/stats: both models", status == 200 and [m["name"] for m in json.loads(body)["model_stats"]] == names,
           f"{status} {body[:200]!r}")


def images_by_name(model2):
    # The pixels of an inference by name are the batch tool's with that model.
    tensor = {"name": "seeds", "datatype": "UINT64", "shape": [2], "data": [11, 12]}
    status, answer, raw = infer({"inputs": [tensor], "parameters": {"binary_data_output": True}}, path="/v2/models/fashion/infer")
    want = read_npy(batch_file(model2, "fashion-u8", "--seeds", "11,12", "--formats", "npy-u8") + ".u8.npy")[1]
    report("infer by name: model fashion's pixels, the batch tool's with its file", status == 200 and raw == want, f"{status}")
    status, _, body = call("GET", "/v1/models")
    listed = json.loads(body) if status == 200 else {}
    report("GET /v1/models: both, faces the default", listed.get("default") == "faces" and
           [m["name"] for m in listed.get("models", [])] == ["faces", "fashion"], f"{status} {body[:300]!r}")
    tags = {}
    for name, path in [("faces", model), ("fashion", model2)]:
        status, fields, png = call("GET", f"/v1/models/{name}/images/42.png")
        folder = batch_file(path, f"{name}-png", "--seeds", "42", "--formats", "png")
        tag = fields.get("etag", "")
        tags[name] = tag
        report(f"GET /v1/models/{name}/images/42.png: the batch tool's seed0042.png of that model, immutable, an ETag",
               status == 200 and png == read(f"{folder}/seed0042.png") and
               fields.get("cache-control") == "public, max-age=31536000, immutable" and len(tag) == 18 and tag[0] == '"',
               f"{status} {fields}")
        for sent in [tag, "W/" + tag, '"0000000000000000", ' + tag, "*"]:
            status, fields, body = call("GET", f"/v1/models/{name}/images/42.png", headers={"If-None-Match": sent})
            report(f"If-None-Match {sent}: 304, no body, the same ETag", status == 304 and body == b"" and
                   fields.get("etag") == tag and "content-length" not in fields, f"{status} {fields} {body[:80]!r}")
        status, _, body = call("GET", f"/v1/models/{name}/images/42.png", headers={"If-None-Match": '"0000000000000000"'})
        report(f"If-None-Match of another tag: 200 and the image ({name})", status == 200 and body == png, f"{status}")
    report("each model its own ETag", tags["faces"] != tags["fashion"], f"{tags}")
    status, fields, png = call("GET", "/v1/images/42.png")
    report("GET /v1/images/42.png: the default model's, no-cache, its ETag, Content-Location of the URL naming it",
           status == 200 and fields.get("cache-control") == "public, no-cache" and fields.get("etag") == tags["faces"] and
           fields.get("content-location") == "/v1/models/faces/images/42.png", f"{status} {fields}")
    status, fields, body = call("POST", "/v1/models/fashion/generate", json.dumps({"seeds": [1, 2], "format": "tar"}).encode())
    meta = {}
    if status == 200:
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            meta = json.loads(tar.extractfile([m for m in tar.getmembers() if m.name.endswith(".json")][0]).read())
    report("a tar answer's json names the model by its file's name and XXH3-128, not its path",
           status == 200 and meta.get("model") == os.path.basename(model2) and len(meta.get("model_xxh3", "")) == 32,
           f"{status} {meta}")
    status, _, body = call("GET", "/metrics")
    text = body.decode()
    report("/metrics: the build's information, each model's, images counted by model",
           'facegen_build_info{version="' in text and 'facegen_model_info{model="fashion",file="' + os.path.basename(model2) in text and
           'facegen_model_info{model="faces",' in text and 'facegen_images_total{model="fashion"}' in text, text[:300])


if mode == "models":
    model2 = sys.argv[6]
    repository_and_config(["faces", "fashion"])
    stats_grow(["faces", "fashion"])
    images_by_name(model2)
    sys.exit(0)
nz = health_and_metadata()
identity(nz)
refusals(nz)
