#!/usr/bin/env python3
"""torch_crosscheck.py: checks build/facegen's images against PyTorch's ConvTranspose2d/BatchNorm2d.

    /usr/bin/python3 tests/torch_crosscheck.py [PROJECT_ROOT] [--seed S] [--device cpu|cuda] [--images N]

The reference is train/facegen_torch.py's module (network.bin) or train/tutorial_torch.py's, the PyTorch
DCGAN tutorial's generator (a safetensors file of that architecture, read by tests/model_files.py's
reader), run in float64: second implementations that share no code with the C++ engines. Checks, one
line each:
  random:  a network from build/make-random-network --seed S, max |error| <= 1e-5
  trained: the shipped models/facegen-*.bin and models/facegen-*.safetensors, max |error| <= 1e-4
Each runs build/facegen --model F --input LAT.txt --output PREFIX --formats npy --device DEVICE on fresh
random latents (an odd count; the seed is printed so a failure reproduces) and reads PREFIX.npy,
(N, 64, 64, 3) float32. Exits non-zero on any failure; exits 0 with "SKIPPED: <why>" only when torch
cannot be imported.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError as e:  # the one reason to skip
    print(f"SKIPPED: torch cannot be imported ({e})")
    sys.exit(0)
import numpy as np  # noqa: E402  (torch needs it; its absence is a failure, not a skip)

MAX_SHOWN = 5


def write_latents(path, z):
    """Text latent file: N, then N*100 floats at %.9g, which round-trips float32 exactly."""
    with open(path, "w") as f:
        f.write(f"{len(z)}\n")
        for row in z:
            f.write(" ".join("%.9g" % v for v in row) + "\n")


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout.strip()}")


def reference_generator(model):
    """The PyTorch module of a model file: network.bin, or a safetensors file of the tutorial's generator."""
    import facegen_torch as ft
    if not model.endswith(".safetensors"):
        return ft.load_network(model)
    import tutorial_torch as tt
    from model_files import read_safetensors  # the one reader of the format in Python
    meta, tensors = read_safetensors(model)
    if meta.get("architecture") != "dcgan":
        raise RuntimeError(f"{model}: architecture {meta.get('architecture')!r}, expected 'dcgan'")
    gen = tt.TutorialGenerator(nz=int(meta["nz"]), ngf=int(meta["ngf"]), nc=int(meta["nc"]))
    gen.load_state_dict(tensors, strict=True)
    return gen.eval()


def check(name, root, model, label, n, seed, atol, tmp, device="cpu"):
    """Runs facegen on n latents and compares with the float64 module; returns True if within atol."""
    import facegen_torch as ft
    z = np.random.default_rng(seed).standard_normal((n, ft.LATENT_DIM)).astype(np.float32)
    latents, prefix = os.path.join(tmp, f"{name}.txt"), os.path.join(tmp, name)
    write_latents(latents, z)
    run([os.path.join(root, "build", "facegen"), "--model", model, "--input", latents,
         "--output", prefix, "--formats", "npy", "--device", device, "--quiet"])
    got = np.load(prefix + ".npy", allow_pickle=False)
    if got.dtype != np.float32 or got.shape != (n, 64, 64, 3):
        print(f"FAIL {name}: {prefix}.npy is {got.dtype} {got.shape}, expected float32 ({n}, 64, 64, 3)")
        return False
    gen = reference_generator(model).double()
    with torch.no_grad():
        want = gen(torch.from_numpy(z.astype(np.float64))).permute(0, 2, 3, 1).numpy()
    err = np.abs(got.astype(np.float64) - want)
    bad = np.argwhere(~(err <= atol))  # NaN counts as bad
    verdict = "ok" if len(bad) == 0 else "FAIL"
    print(f"{verdict} {name}: {label} on the {device} backend, {n} images, latent seed {seed}, max |error| {np.nanmax(err):.3g} "
          f"(limit {atol:g}), image std {want.std():.3f}")
    for idx in bad[:MAX_SHOWN]:
        i = tuple(int(v) for v in idx)
        print(f"  at (image, y, x, channel) {i}: facegen {got[i]!r}, torch {want[i]!r}")
    if len(bad) > MAX_SHOWN:
        print(f"  ... {len(bad) - MAX_SHOWN} more")
    return len(bad) == 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", nargs="?", default=os.getcwd(), help="project root (default: cwd)")
    p.add_argument("--seed", type=int, default=None, help="latent and network seed (default: fresh)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="facegen backend to check (default: cpu; cuda on a GPU machine)")
    p.add_argument("--images", type=int, default=5, help="images of the shipped model to compare (default: 5)")
    args = p.parse_args()
    root = os.path.abspath(args.root)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    sys.path.insert(0, os.path.join(root, "train"))

    missing = [b for b in ("facegen", "make-random-network")
               if not os.access(os.path.join(root, "build", b), os.X_OK)]
    if missing:
        print(f"FAIL: {', '.join('build/' + b for b in missing)} not found under {root}: run make first")
        return 1
    shipped = sorted(glob.glob(os.path.join(root, "models", "facegen-*.bin")) +
                     glob.glob(os.path.join(root, "models", "facegen-*.safetensors")))
    ok = True
    with tempfile.TemporaryDirectory(prefix="torch-crosscheck-") as tmp:
        model = os.path.join(tmp, "random.bin")
        try:
            run([os.path.join(root, "build", "make-random-network"), "--seed", str(seed), "--output", model])
            ok &= check("random", root, model, f"make-random-network --seed {seed}", 3, seed + 1, 1e-5, tmp,
                        args.device)
        except RuntimeError as e:
            print(f"FAIL random: {e}")
            ok = False
        if not shipped:
            print(f"FAIL trained: no models/facegen-*.bin or facegen-*.safetensors under {root}")
            ok = False
        for model in shipped:
            try:
                ok &= check("trained", root, model, os.path.relpath(model, root), args.images, seed + 2, 1e-4,
                            tmp, args.device)
            except RuntimeError as e:
                print(f"FAIL trained: {e}")
                ok = False
    print(f"torch crosscheck: {'all passed' if ok else 'FAILED'} (seed {seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
