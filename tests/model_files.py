#!/usr/bin/env python3
"""model_files.py: model files end to end against PyTorch itself, on the CPU or the GPU.

    /usr/bin/python3 tests/model_files.py [PROJECT_ROOT] [--seed S] [--device cpu|cuda]

For nc 1 and 3, ngf 32 and 64, nz 100 and 128: the PyTorch DCGAN tutorial's Generator (written out
below), random weights and batch-norm statistics, saved with torch.save (one with DataParallel's
`module.` prefix), exported by tools/export_model.py, loaded back into PyTorch from the safetensors
bytes with load_state_dict(strict=True), and run by build/facegen --device cpu on fresh latents from a
.npy file: facegen's images must be within 1e-5 of PyTorch's float32 forward pass. Then the SHPC
network: build/random-network.bin exported to safetensors gives byte-identical outputs to the
network.bin itself, and PyTorch's ConvTranspose2d(k=5, stride 2, padding 1) cropped to 2h, with the
projection's per-output bias, loaded from that file, matches facegen within 1e-5. Under MPI (when
mpirun is there), 2 ranks write byte-identical files to one process, for a grey model. Last, bad
inputs: the exporter and facegen refuse each in one line with exit status 1. Exit 77 (skipped) only
when torch cannot be imported. With --device cuda (the GPU machine) every facegen run is on the GPU,
and each tutorial model is run in fp32, tf32 and bf16, within each precision's tolerance
(PRECISION_TOLERANCE) of PyTorch's float32 forward pass.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    from torch import nn
except ImportError as e:
    print(f"skip: torch cannot be imported ({e})")
    sys.exit(77)
import numpy as np  # noqa: E402

ATOL = 1e-5
# The largest |facegen - PyTorch float32| allowed per GPU precision: tests/run_on_gpu.sh's limits.
PRECISION_TOLERANCE = {"fp32": ATOL, "tf32": 7.5e-3, "bf16": 5e-2}
DEVICE = ["--device", "cpu"]  # every facegen run's device flags; main() sets them from --device
failures = []


def report(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


class Generator(nn.Module):
    """The PyTorch DCGAN tutorial's generator (pytorch/examples dcgan), as its users train it."""

    def __init__(self, nz, ngf, nc):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 8), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2), nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z.view(z.shape[0], -1, 1, 1))


class ShpcProjection(nn.Module):
    """The SHPC network's first layer: ConvTranspose2d(nz, 8g, 4, 1, 0) with a bias per output value."""

    def __init__(self, nz, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(nz, channels, 4, 4))
        self.bias = nn.Parameter(torch.zeros(channels, 4, 4))

    def forward(self, z):
        return nn.functional.conv_transpose2d(z, self.weight) + self.bias


class CroppedConvTranspose2d(nn.ConvTranspose2d):
    """ConvTranspose2d(k=5, stride 2, padding 1) gives 2h + 1 rows and columns; SHPC keeps the first 2h."""

    def forward(self, x):
        return super().forward(x)[:, :, :-1, :-1]


class ShpcGenerator(nn.Module):
    """The SHPC facegen network as the same Sequential `main` (kernel 5, biases)."""

    def __init__(self, nz=100, ngf=64, nc=3):
        super().__init__()
        c = [ngf * 8, ngf * 4, ngf * 2, ngf, nc]
        layers = [ShpcProjection(nz, c[0])]
        for i in range(4):
            layers += [nn.BatchNorm2d(c[i]), nn.ReLU(True), CroppedConvTranspose2d(c[i], c[i + 1], 5, 2, 1)]
        self.main = nn.Sequential(*layers, nn.Tanh())

    def forward(self, z):
        return self.main(z.view(z.shape[0], -1, 1, 1))


def randomize(gen, rng):
    """Random weights at scales that keep images away from flat and from +-1 (He's rule, the last layer
    scaled by 0.6); random batch-norm statistics."""
    convs = [m for m in gen.modules() if isinstance(m, (nn.ConvTranspose2d, ShpcProjection))]
    with torch.no_grad():
        for m in gen.modules():
            if isinstance(m, (nn.ConvTranspose2d, ShpcProjection)):
                c_in, k = m.weight.shape[0], m.weight.shape[2]
                first = m is convs[0]
                std = (1.0 / c_in) ** 0.5 if first else (2.0 / (c_in * k * k / 4)) ** 0.5
                std *= 0.6 if m is convs[-1] else 1.0
                m.weight.copy_(torch.from_numpy(rng.standard_normal(m.weight.shape) * std))
                if m.bias is not None:
                    m.bias.copy_(torch.from_numpy(rng.standard_normal(m.bias.shape) * 0.1))
            elif isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(torch.from_numpy(rng.uniform(0.7, 1.3, n)))
                m.bias.copy_(torch.from_numpy(rng.normal(0.0, 0.2, n)))
                m.running_mean.copy_(torch.from_numpy(rng.normal(0.0, 0.2, n)))
                m.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, n)))
                m.num_batches_tracked.fill_(int(rng.integers(1, 1000)))
    return gen.eval()


def read_safetensors(path):
    """(metadata, {key: tensor}) from a safetensors file, read here from the format's definition (the
    safetensors package is not in Debian): u64 header length, JSON header, data."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I64": np.int64}[entry["dtype"]]
        begin, end = entry["data_offsets"]
        array = np.frombuffer(body[begin:end], dtype=np.dtype(dtype).newbyteorder("<")).reshape(entry["shape"])
        tensors[key] = torch.from_numpy(array.copy())
    return header.get("__metadata__", {}), tensors


def run(cmd, expect=0):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != expect:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}, expected {expect}:\n{proc.stderr.strip()}")
    return proc


def facegen_images(root, model, latents, tmp, name, extra=()):
    prefix = os.path.join(tmp, name)
    run([os.path.join(root, "build", "facegen"), "--model", model, "--input", latents, "--output", prefix,
         "--formats", "npy", *DEVICE, "--quiet", *extra])
    return np.load(prefix + ".npy", allow_pickle=False)


def compare(name, got, gen, z, atol=ATOL):
    """facegen's (N, 64, 64, nc) against the module's float32 forward pass (N, nc, 64, 64)."""
    with torch.no_grad():
        ref = gen.float()(torch.from_numpy(z)).permute(0, 2, 3, 1).numpy()
    if got.shape != ref.shape or got.dtype != np.float32:
        report(False, f"{name}: facegen gave {got.dtype} {got.shape}, PyTorch {ref.shape}")
        return
    err = np.abs(got.astype(np.float64) - ref)
    spread, saturated = float(np.std(ref)), float(np.mean(np.abs(ref) > 0.99))
    # The spread and saturation guards keep the comparison meaningful (not flat, not all at tanh's +-1,
    # where errors vanish); random weights put up to a few percent of values beyond 0.99 (1.58% seen).
    report(err.max() <= atol and 0.05 < spread and saturated < 0.05,
           f"{name}: max |facegen - PyTorch| = {err.max():.2e} (<= {atol:g}), image std {spread:.3f}, "
           f"{100 * saturated:.2f}% beyond 0.99")


def tutorial_models(root, tmp, rng, exporter):
    for nc in (1, 3):
        for ngf in (32, 64):
            for nz in (100, 128):
                name = f"tutorial-nz{nz}-ngf{ngf}-nc{nc}"
                gen = randomize(Generator(nz, ngf, nc).double(), rng).float()
                state = gen.state_dict()
                if nz == 128 and ngf == 32:  # as saved from a DataParallel model
                    state = {"module." + k: v for k, v in state.items()}
                pth, st = os.path.join(tmp, name + ".pth"), os.path.join(tmp, name + ".safetensors")
                torch.save(state, pth)
                run(exporter + [pth, st])
                meta, tensors = read_safetensors(st)
                expected = {"format": "pt", "architecture": "dcgan", "nz": str(nz), "ngf": str(ngf), "nc": str(nc),
                            "kernel_size": "4", "bias": "false", "image_size": "64"}
                report(meta == expected, f"{name}: __metadata__ {meta}")
                back = Generator(nz, ngf, nc)
                back.load_state_dict(tensors, strict=True)
                same = all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), gen.state_dict().values()))
                report(same, f"{name}: the safetensors file loads into the tutorial Generator with strict=True, equal")
                z = rng.standard_normal((5, nz)).astype(np.float32)
                latents = os.path.join(tmp, name + "-z.npy")
                np.save(latents, z)
                if "cuda" not in DEVICE:
                    compare(name, facegen_images(root, st, latents, tmp, name), gen, z)
                    continue
                for precision, atol in PRECISION_TOLERANCE.items():
                    got = facegen_images(root, st, latents, tmp, f"{name}-{precision}", ("--precision", precision))
                    compare(f"{name} {precision}", got, gen, z, atol)


def shpc_model(root, tmp, rng, exporter):
    model = os.path.join(root, "build", "random-network.bin")
    st = os.path.join(tmp, "shpc.safetensors")
    run(exporter + [model, st])
    z = rng.standard_normal((7, 100)).astype(np.float32)
    latents = os.path.join(tmp, "shpc-z.npy")
    np.save(latents, z)
    outputs = {}
    for label, path in (("bin", model), ("st", st)):
        prefix = os.path.join(tmp, f"shpc-{label}")
        run([os.path.join(root, "build", "facegen"), "--model", path, "--input", latents, "--output", prefix,
             "--formats", "txt,bmp,npy", *DEVICE, "--quiet"])
        outputs[label] = [open(prefix + ext, "rb").read() for ext in (".txt", ".bmp", ".npy")]
    report(outputs["bin"] == outputs["st"], "shpc: network.bin and its safetensors export give byte-identical txt, bmp, npy")
    meta, tensors = read_safetensors(st)
    gen = ShpcGenerator()
    gen.load_state_dict(tensors, strict=True)
    got = np.load(os.path.join(tmp, "shpc-st.npy"))
    compare("shpc: PyTorch ConvTranspose2d(k=5, s=2, p=1) cropped to 2h, per-output projection bias", got,
            gen.eval(), z)


def mpi_grey(root, tmp, rng, exporter):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("skip  MPI: no mpirun here")
        return
    gen = randomize(Generator(100, 32, 1).double(), rng).float()
    pth, st = os.path.join(tmp, "grey.pth"), os.path.join(tmp, "grey.safetensors")
    torch.save(gen.state_dict(), pth)
    run(exporter + [pth, st])
    latents = os.path.join(tmp, "grey-z.npy")
    np.save(latents, rng.standard_normal((11, 100)).astype(np.float32))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    files = {}
    for label, launcher in (("one", []), ("mpi", [mpirun, "--oversubscribe", "-np", "2"])):
        prefix = os.path.join(tmp, f"grey-{label}")
        proc = subprocess.run(launcher + [os.path.join(root, "build", "facegen"), "--model", st, "--input", latents,
                                          "--output", prefix, "--formats", "txt,bmp,npy,png,mosaic-png",
                                          *DEVICE, "--quiet"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if proc.returncode != 0:
            report(False, f"MPI grey ({label}): exit {proc.returncode}: {proc.stderr.strip()}")
            return
        names = [prefix + ext for ext in (".txt", ".bmp", ".npy", ".png")]
        names += sorted(os.path.join(prefix, f) for f in os.listdir(prefix))
        files[label] = [open(n, "rb").read() for n in names]
    report(files["one"] == files["mpi"], "MPI: 2 ranks write the grey model's txt, bmp, npy, png and mosaic-png "
                                         "byte-identical to one process")
    npy = np.load(os.path.join(tmp, "grey-one.npy"))
    report(npy.shape == (11, 64, 64, 1), f"grey npy shape {npy.shape}")


def refusals(root, tmp, exporter):
    """Each bad input: exit status 1 and one line naming what is wrong."""
    def one_line(cmd, must_contain, what):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = proc.stderr.strip().splitlines()
        report(proc.returncode == 1 and len(lines) == 1 and must_contain in lines[0],
               f"{what}: exit {proc.returncode}, {lines[0] if lines else '(nothing on stderr)'}")

    gen = Generator(100, 32, 3)
    state = gen.state_dict()
    cases = {
        "wrong shape": ({**state, "main.4.running_var": torch.ones(7)}, "main.4.running_var has shape (7,)"),
        "missing key": ({k: v for k, v in state.items() if k != "main.6.weight"}, "has no tensor main.6.weight"),
        "extra key": ({**state, "main.20.weight": torch.ones(3)}, "has a tensor main.20.weight"),
        "not a generator": ({"fc.weight": torch.ones(3, 3)}, "has no tensor main.0.weight"),
        "NaN": ({**state, "main.3.weight": state["main.3.weight"].clone().fill_(float("nan"))}, "is nan"),
        "a training checkpoint": ({"netG": state, "epoch": torch.tensor(3)},
                                  "save the generator's own state_dict, torch.save(ckpt['netG'], 'netG.pth')"),
    }
    for what, (bad, expected) in cases.items():
        path = os.path.join(tmp, "bad.pth")
        torch.save(bad, path)
        one_line(exporter + [path, os.path.join(tmp, "bad.safetensors")], expected, f"exporter refuses {what}")
    torch.save([1, 2, 3], os.path.join(tmp, "list.pth"))
    one_line(exporter + [os.path.join(tmp, "list.pth"), os.path.join(tmp, "x.safetensors")], "holds a list",
             "exporter refuses a list")
    with open(os.path.join(tmp, "junk.bin"), "wb") as f:
        f.write(b"\x01\x02" * 1000)
    one_line(exporter + [os.path.join(tmp, "junk.bin"), os.path.join(tmp, "x.safetensors")],
             "neither a network.bin", "exporter refuses random bytes")
    report(not os.path.exists(os.path.join(tmp, "x.safetensors")) and not os.path.exists(os.path.join(tmp, "bad.safetensors")),
           "exporter: a refused input leaves no output file")
    # facegen on broken safetensors files: a truncated one and one whose header lies about an offset.
    good = os.path.join(tmp, "tutorial-nz100-ngf32-nc3.safetensors")
    data = open(good, "rb").read()
    with open(os.path.join(tmp, "truncated.safetensors"), "wb") as f:
        f.write(data[:len(data) - 100])
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header["main.3.weight"]["data_offsets"][1] += 4
    text = json.dumps(header).encode()
    with open(os.path.join(tmp, "lying.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[8 + length:])
    latents = os.path.join(tmp, "tutorial-nz100-ngf32-nc3-z.npy")
    for name, expected in (("truncated", "beyond the"), ("lying", "main.3.weight")):
        one_line([os.path.join(root, "build", "facegen"), "--model", os.path.join(tmp, name + ".safetensors"),
                  "--input", latents, "--output", os.path.join(tmp, "never"), "--device", "cpu"],
                 expected, f"facegen refuses a {name} safetensors file")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    DEVICE[:] = ["--device", args.device]
    print(f"model files against PyTorch {torch.__version__}, seed {args.seed}, facegen --device {args.device}")
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    exporter = [sys.executable, os.path.join(root, "tools", "export_model.py")]
    with tempfile.TemporaryDirectory(prefix="facegen-model-files.") as tmp:
        tutorial_models(root, tmp, rng, exporter)
        shpc_model(root, tmp, rng, exporter)
        mpi_grey(root, tmp, rng, exporter)
        refusals(root, tmp, exporter)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
