#!/usr/bin/env python3
"""pytorch_reference.py: the same generator in PyTorch, timed beside facegen's numbers.

Reads --dir (written by build/facegen-bench): network.bin, latents.bin, images_<precision>.bin and
results.json. For fp32 (TF32 off), tf32 (TF32 on) and bf16 (weights and inputs in bfloat16) it times
eager PyTorch (cuDNN) at batch 64, 1024 and 8192 and torch.compile(mode="max-autotune") at batch 64
and 8192 only (compiling takes minutes; --compile-budget caps the seconds spent on it, and later
compiles are skipped and reported as skipped). Then it computes a float64 reference of the first 256
images on the GPU and prints the worst absolute error of PyTorch and of facegen in each precision,
and the images/s table with facegen / best PyTorch ratios.

Then the same for the PyTorch DCGAN tutorial's generator (tutorial_network.bin, nz 100, ngf 64, nc 3,
4x4 kernels, no biases), written as the tutorial writes it (nn.Sequential of ConvTranspose2d,
BatchNorm2d, ReLU, Tanh): facegen's fixed-shape and any-shape kernels against eager and torch.compile on the same
latents, and both against float64; --tutorial-only runs that part alone.

--fp32-tc (after facegen-bench --fp32-tc) runs only PyTorch's side of that section: for each network it
wrote (KEY_network.bin, KEY_latents.bin: the faces model's 1,000 images, a random faces-shaped
network's and the random SHPC network's 200) the errors against float64, layer by layer (each layer on
the float64 pass's own input rounded to float32, as facegen-bench measures it) and whole, in fp32
(cuDNN, TF32 off; the faces model in tf32 too), eager fp32 images/s, and beside them facegen's fp32
FFMA and fp32 on tensor cores (mma.sync, wgmma) from results.json, with the verdict: the wgmma form's
(the default on an H100 or H200) worst and mean error within 1.5 times the better of PyTorch fp32's and
FFMA's, every layer and the whole network of every network.
"""
import argparse
import sys
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

CH = [512, 256, 128, 64, 3]
SIZE = [4, 8, 16, 32, 64]
EPS = 1e-5


def load_params(path):
    f = np.fromfile(path, dtype=np.float32)
    assert f.size == 5137283, f.size
    o = 0
    def take(n, shape):
        nonlocal o
        t = torch.from_numpy(f[o:o + n].copy()).reshape(shape)
        o += n
        return t
    p = {"proj_w": take(100 * 8192, (100, 8192)), "proj_b": take(8192, (8192,))}
    for s in range(4):
        c, k = CH[s], CH[s + 1]
        p[f"bn{s}"] = [take(c, (c,)) for _ in range(4)]  # beta, gamma, mean, var
        w = take(25 * k * c, (5, 5, k, c))
        p[f"w{s}"] = w.permute(3, 2, 0, 1).contiguous()  # ConvTranspose2d layout (c_in, c_out, kh, kw)
        p[f"b{s}"] = take(k, (k,))
    return p


class Generator(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.proj = torch.nn.Linear(100, 8192)
        self.proj.weight.data = p["proj_w"].t().contiguous()
        self.proj.bias.data = p["proj_b"]
        self.bns = torch.nn.ModuleList()
        self.convs = torch.nn.ModuleList()
        for s in range(4):
            bn = torch.nn.BatchNorm2d(CH[s], eps=EPS)
            beta, gamma, mean, var = p[f"bn{s}"]
            bn.weight.data, bn.bias.data = gamma.clone(), beta.clone()
            bn.running_mean.data, bn.running_var.data = mean.clone(), var.clone()
            # padding=1 gives 2H+1 outputs; dropping the last row and column is SAME padding.
            conv = torch.nn.ConvTranspose2d(CH[s], CH[s + 1], 5, stride=2, padding=1)
            conv.weight.data, conv.bias.data = p[f"w{s}"].clone(), p[f"b{s}"].clone()
            self.bns.append(bn)
            self.convs.append(conv)
        self.eval()

    def forward(self, z):
        x = self.proj(z).view(-1, 4, 4, 512).permute(0, 3, 1, 2)
        for s in range(4):
            x = self.convs[s](F.relu(self.bns[s](x)))
            h = 2 * SIZE[s]
            x = x[:, :, :h, :h]
        return torch.tanh(x).permute(0, 2, 3, 1)  # (n, 64, 64, 3)


TUTORIAL_NZ, TUTORIAL_NGF, TUTORIAL_NC = 100, 64, 3


def tutorial_generator(nz, ngf, nc):
    """The generator of the PyTorch DCGAN tutorial, as the tutorial writes it."""
    return torch.nn.Sequential(
        torch.nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False), torch.nn.BatchNorm2d(ngf * 8), torch.nn.ReLU(True),
        torch.nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False), torch.nn.BatchNorm2d(ngf * 4), torch.nn.ReLU(True),
        torch.nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), torch.nn.BatchNorm2d(ngf * 2), torch.nn.ReLU(True),
        torch.nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), torch.nn.BatchNorm2d(ngf), torch.nn.ReLU(True),
        torch.nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), torch.nn.Tanh())


def load_tutorial(path, nz, ngf, nc):
    """The flat float layout (generator/network.hpp) into the tutorial's state_dict."""
    f = np.fromfile(path, dtype=np.float32)
    ch = [ngf * 8, ngf * 4, ngf * 2, ngf, nc]
    o = 0
    def take(n, shape):
        nonlocal o
        t = torch.from_numpy(f[o:o + n].copy()).reshape(shape)
        o += n
        return t
    sd = {}
    # projection (nz, 4*4*C0), columns in HWC order -> ConvTranspose2d weight (nz, C0, 4, 4)
    sd["0.weight"] = take(nz * 16 * ch[0], (nz, 4, 4, ch[0])).permute(0, 3, 1, 2).contiguous()
    take(16 * ch[0], (16 * ch[0],))  # projection bias: zeros, the tutorial has none
    for s in range(4):
        c, k = ch[s], ch[s + 1]
        beta, gamma, mean, var = [take(c, (c,)) for _ in range(4)]
        bn = 3 * s + 1
        sd[f"{bn}.weight"], sd[f"{bn}.bias"], sd[f"{bn}.running_mean"], sd[f"{bn}.running_var"] = gamma, beta, mean, var
        sd[f"{bn}.num_batches_tracked"] = torch.tensor(0)
        sd[f"{3 * s + 3}.weight"] = take(16 * k * c, (4, 4, k, c)).permute(3, 2, 0, 1).contiguous()  # (c_in, c_out, kh, kw)
        take(k, (k,))  # bias: zeros
    assert o == f.size, (o, f.size)
    g = tutorial_generator(nz, ngf, nc)
    g.load_state_dict(sd)
    return g.eval()


def set_precision(prec):
    tf32 = prec == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def time_images_per_s(fn, z, min_seconds=0.5):
    with torch.no_grad():
        for _ in range(3):
            fn(z)
        torch.cuda.synchronize()
        reps, t = 1, 0.0
        while True:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn(z)
            b.record()
            torch.cuda.synchronize()
            t = a.elapsed_time(b) / 1e3
            if t >= min_seconds or reps >= 4096:
                break
            reps *= 4
        return z.shape[0] * reps / t


def time_batches(model, z_all, dtype, prec, label, budget, compile_spent, rows):
    """Eager images/s of model at batches 64, 1024 and 8192, and torch.compile's at 64 and 8192 while
    compile_spent (seconds, all runs together) stays under budget; appends (prec, batch, eager,
    compiled or None) to rows and returns compile_spent."""
    compiled = None
    for n in [64, 1024, 8192]:
        z = z_all[:n].to(dtype).contiguous()
        e = time_images_per_s(lambda x: model(x), z)
        c = None
        if n in (64, 8192):
            if compile_spent < budget:
                t0 = time.time()
                try:
                    if compiled is None:
                        compiled = torch.compile(model, mode="max-autotune")
                    c = time_images_per_s(compiled, z)
                except Exception as ex:  # report, keep the eager numbers
                    print(f"  torch.compile {label} batch {n} failed: {type(ex).__name__}: {ex}")
                compile_spent += time.time() - t0
            else:
                print(f"  torch.compile {label} batch {n}: skipped, compile budget of {budget:.0f} s spent")
        rows.append((prec, n, e, c))
        print(f"  {prec} batch {n}: eager {e:,.0f} images/s" + (f", compiled {c:,.0f} images/s" if c else ""), flush=True)
    return compile_spent


def tutorial(args, z_all, ours, compile_spent):
    """The tutorial generator: errors vs float64 and images/s beside facegen's fixed-shape and any-shape kernels."""
    dev = torch.device("cuda")
    path = os.path.join(args.dir, "tutorial_network.bin")
    nz, ngf, nc = TUTORIAL_NZ, TUTORIAL_NGF, TUTORIAL_NC
    z4 = z_all[:, :nz].reshape(-1, nz, 1, 1)
    with torch.no_grad():
        ref = load_tutorial(path, nz, ngf, nc).to(dev).double()(z4[:256].double()).permute(0, 2, 3, 1)
    print(f"\nPyTorch DCGAN tutorial generator (nz {nz}, ngf {ngf}, nc {nc}):")
    rows, errors = [], {}
    for prec in ["fp32", "tf32", "bf16"]:
        set_precision(prec)
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        model = load_tutorial(path, nz, ngf, nc).to(dev).to(dtype).to(memory_format=torch.channels_last)
        with torch.no_grad():
            out = model(z4[:256].to(dtype)).permute(0, 2, 3, 1).double()
        ours_img = torch.from_numpy(np.fromfile(os.path.join(args.dir, f"tutorial_images_{prec}.bin"), dtype=np.float32))
        errors[prec] = ((out - ref).abs().max().item(), (ours_img.to(dev).double().view_as(ref) - ref).abs().max().item())
        compile_spent = time_batches(model, z4, dtype, prec, f"tutorial {prec}", args.compile_budget, compile_spent, rows)
    print("worst |error| vs float64, tutorial generator, first 256 images:")
    for prec, (pt, fg) in errors.items():
        print(f"  {prec}: PyTorch {pt:.2e}   facegen {fg:.2e}")
    print("\ntutorial images/s   batch   facegen fixed  facegen any-shape   torch eager  torch compile"
          "  fixed/best torch   SHPC facegen")
    for prec, n, e, c in rows:
        fk = ours.get(f"tutorial_{prec}_b{n}_kernels", 0)
        fg = ours.get(f"tutorial_any_{prec}_b{n}_kernels", 0)
        shpc = ours.get(f"tutorial_shpc_{prec}_b{n}_kernels", 0)
        best = max(e, c or 0)
        print(f"  {prec:6s} {n:14d} {fk:14,.0f} {fg:16,.0f} {e:13,.0f} {c or 0:14,.0f} {fk / best:16.2f}x {shpc:20,.0f}")
    return compile_spent, errors


class Stats:
    """worst and mean |error| over every value added"""

    def __init__(self):
        self.worst, self.sum, self.count = 0.0, 0.0, 0

    def add(self, got, want):
        e = (got.double() - want).abs()
        self.worst = max(self.worst, e.max().item())
        self.sum += e.sum().item()
        self.count += e.numel()

    def mean(self):
        return self.sum / max(self.count, 1)


def shpc_layers(g):
    """facegen's five layers of the SHPC Generator g: the projection with the first batch norm and
    ReLU, each transposed convolution (cropped) with the next batch norm and ReLU, the last with tanh."""
    def projection(z):
        return F.relu(g.bns[0](g.proj(z).view(-1, 4, 4, 512).permute(0, 3, 1, 2)))

    def tconv(s):
        def layer(x):
            h = 2 * SIZE[s]
            y = g.convs[s](x)[:, :, :h, :h]
            return F.relu(g.bns[s + 1](y)) if s < 3 else torch.tanh(y)
        return layer
    return [projection] + [tconv(s) for s in range(4)]


def tutorial_layers(g):
    """facegen's five layers of the tutorial's nn.Sequential g (z as (n, nz, 1, 1))."""
    return [g[a:b] for a, b in [(0, 3), (3, 6), (6, 9), (9, 12), (12, 14)]]


# facegen-bench --fp32-tc's networks: results.json key, what, architecture
FP32_NETWORKS = [("faces", "the faces model", "tutorial"),
                 ("rfaces", "a random network of the faces model's shape", "tutorial"),
                 ("rshpc", "the random SHPC network", "shpc")]
FP32_VARIANTS = [("fp32_ffma", "facegen FFMA (v1)"), ("fp32_tc", "facegen tc mma.sync (v2)"), ("fp32_wgmma", "facegen tc wgmma (v3)"),
                 ("fp32_wgmma_r2", "wgmma FADD / 2 steps (v5)")]
DEFAULT_VARIANT = 2  # fp32_wgmma: the default on an H100 or H200, which the verdict judges
LAYER_NAMES = ["projection+bn+relu", "tconv1+bn+relu", "tconv2+bn+relu", "tconv3+bn+relu", "tconv4+tanh", "network (images)"]


def pytorch_errors(arch, path, z, prec, dev):
    """PyTorch's |error| against its own float64 in precision prec: per layer (each on the float64
    pass's own input rounded to float32) and whole. Returns (layer Stats list, whole Stats)."""
    def build():
        if arch == "tutorial":
            return load_tutorial(path, TUTORIAL_NZ, TUTORIAL_NGF, TUTORIAL_NC).to(dev)
        return Generator(load_params(path)).to(dev)
    layers_of = tutorial_layers if arch == "tutorial" else shpc_layers
    g64 = build().double()
    set_precision(prec)
    g32 = build()
    l64, l32 = layers_of(g64), layers_of(g32)
    layer = [Stats() for _ in l64]
    whole = Stats()
    shape = (-1, z.shape[1], 1, 1) if arch == "tutorial" else (-1, z.shape[1])
    with torch.no_grad():
        for i in range(0, z.shape[0], 200):
            zi = z[i:i + 200].view(*shape)
            whole.add(g32(zi), g64(zi.double()))
            x = zi.double()
            for li in range(len(l64)):
                x32 = x.float()
                want = l64[li](x32.double())
                layer[li].add(l32[li](x32), want)
                x = want
    set_precision("fp32")
    return layer, whole


def fp32_tc(args, ours):
    """PyTorch's side of facegen-bench --fp32-tc; returns the verdict's exit status."""
    dev = torch.device("cuda")
    bad = []
    for key, what, arch in FP32_NETWORKS:
        path = os.path.join(args.dir, f"{key}_network.bin")
        if not os.path.exists(path):
            print(f"\n{what}: no {path}, skipped")
            continue
        z = torch.from_numpy(np.fromfile(os.path.join(args.dir, f"{key}_latents.bin"), dtype=np.float32).reshape(-1, 100)).to(dev)
        layer, whole = pytorch_errors(arch, path, z, "fp32", dev)
        print(f"\n{z.shape[0]} images of {what} against float64, |error| worst / mean (facegen's from results.json), "
              "and each tensor-core form against the better of PyTorch fp32's and FFMA's:")
        print(f"  {'layer':20s} {'PyTorch fp32':>23s}" + "".join(f" {name:>25s}" for _, name in FP32_VARIANTS)
              + "   v2, v3, v5: worst, mean")
        for li, name in enumerate(LAYER_NAMES):
            pt = layer[li] if li < len(layer) else whole
            lk = f"layer{li}" if li < len(layer) else "network"
            got = [(ours.get(f"{key}_{v}_{lk}_worst", float("nan")), ours.get(f"{key}_{v}_{lk}_mean", float("nan"))) for v, _ in FP32_VARIANTS]
            ffma = got[0]
            ratios = [(w / min(pt.worst, ffma[0]), m / min(pt.mean(), ffma[1])) for w, m in got[1:]]
            judged = ratios[DEFAULT_VARIANT - 1]
            ok = judged[0] <= 1.5 and judged[1] <= 1.5  # false for NaN too
            if not ok:
                bad.append(f"{key} {name}")
            print(f"  {name:20s} {pt.worst:10.3e} / {pt.mean():10.3e}" + "".join(f" {w:11.3e} / {m:10.3e}" for w, m in got)
                  + "   " + "; ".join(f"{w:5.2f}, {m:5.2f}" for w, m in ratios) + ("" if ok else "  OVER 1.5"))
        if key == "faces":
            _, tw = pytorch_errors(arch, path, z, "tf32", dev)
            print(f"  {'network, tf32':20s} PyTorch {tw.worst:.3e} / {tw.mean():.3e}; facegen "
                  f"{ours.get('faces_tf32_network_worst', float('nan')):.3e} / {ours.get('faces_tf32_network_mean', float('nan')):.3e}")
            print(f"  {'network, bf16':20s} facegen {ours.get('faces_bf16_network_worst', float('nan')):.3e} / "
                  f"{ours.get('faces_bf16_network_mean', float('nan')):.3e}")
    path = os.path.join(args.dir, "faces_network.bin")
    model = load_tutorial(path, TUTORIAL_NZ, TUTORIAL_NGF, TUTORIAL_NC).to(dev).to(memory_format=torch.channels_last)
    print("\nPyTorch eager fp32 (cuDNN, TF32 off), faces model, images/s beside facegen's kernels alone:")
    for b in [64, 512, 8192]:
        zb = torch.randn(b, TUTORIAL_NZ, 1, 1, device=dev)
        rate = time_images_per_s(lambda x: model(x), zb)
        print(f"  batch {b:5d}: eager {rate:12,.0f}; facegen" + ", ".join(
            f" {name} {ours.get(f'faces_{v}_b{b}_kernels', 0):,.0f}" for v, name in FP32_VARIANTS[:3]))
    if bad:
        print(f"\nverdict: FAIL: fp32 on tensor cores (wgmma) exceeds 1.5 times the better of PyTorch fp32's and FFMA's error in "
              f"{', '.join(bad)}")
        return 1
    print("\nverdict: OK: fp32 on tensor cores (wgmma) is within 1.5 times the better of PyTorch fp32's and FFMA's error, "
          "worst and mean, every layer and the whole network of every network")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="build/bench-run")
    ap.add_argument("--compile-budget", type=float, default=240.0, help="seconds for torch.compile, all runs together")
    ap.add_argument("--tutorial-only", action="store_true", help="the tutorial generator alone (facegen-bench --tutorial-only)")
    ap.add_argument("--fp32-tc", action="store_true", help="the faces model's errors alone (facegen-bench --fp32-tc)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    if args.fp32_tc:
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
        sys.exit(fp32_tc(args, json.load(open(os.path.join(args.dir, "results.json")))))
    z_all = torch.from_numpy(np.fromfile(os.path.join(args.dir, "latents.bin"), dtype=np.float32).reshape(-1, 100)).to(dev)
    ours = json.load(open(os.path.join(args.dir, "results.json")))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    if args.tutorial_only:
        _, tutorial_errors = tutorial(args, z_all, ours, 0.0)
        verdict({f"tutorial {p}": e for p, e in tutorial_errors.items()})
        return
    params = load_params(os.path.join(args.dir, "network.bin"))

    with torch.no_grad():
        ref = Generator(params).to(dev).double()(z_all[:256].double())

    rows, errors = [], {}
    compile_spent = 0.0
    for prec in ["fp32", "tf32", "bf16"]:
        set_precision(prec)
        dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        model = Generator(params).to(dev).to(dtype).to(memory_format=torch.channels_last)
        with torch.no_grad():
            out = model(z_all[:256].to(dtype)).double()
        ours_img = torch.from_numpy(np.fromfile(os.path.join(args.dir, f"images_{prec}.bin"), dtype=np.float32)).to(dev).double()
        errors[prec] = ((out - ref).abs().max().item(), (ours_img.view_as(ref) - ref).abs().max().item())
        compile_spent = time_batches(model, z_all, dtype, prec, prec, args.compile_budget, compile_spent, rows)

    print("\nworst |error| vs float64, first 256 images:")
    for prec, (pt, fg) in errors.items():
        print(f"  {prec}: PyTorch {pt:.2e}   facegen {fg:.2e}")
    targets = {("fp32", 64): 120e3, ("fp32", 8192): 135e3, ("tf32", 64): 330e3, ("tf32", 8192): 660e3,
               ("bf16", 64): 480e3, ("bf16", 8192): 1.47e6}
    print("\nimages/s        batch   facegen kernels  facegen e2e  e2e pinned   cuBLAS base   torch eager  torch compile  facegen/best torch  target")
    for prec, n, e, c in rows:
        k = f"{prec}_b{n}"
        fk, fe, cb = ours.get(k + "_kernels", 0), ours.get(k + "_e2e", 0), ours.get(k + "_cublas", 0)
        fp = ours.get(k + "_e2e_pinned", 0)
        best = max(e, c or 0)
        t = targets.get((prec, n))
        print(f"  {prec:6s} {n:12d} {fk:16,.0f} {fe:12,.0f} {fp:11,.0f} {cb:13,.0f} {e:13,.0f} {c or 0:14,.0f} {fk / best:18.2f}x  "
              + (f"{t:,.0f}" if t else "-"))

    compile_spent, tutorial_errors = tutorial(args, z_all, ours, compile_spent)

    errors.update({f"tutorial {p}": e for p, e in tutorial_errors.items()})
    verdict(errors)


def verdict(errors):
    """facegen's worst error vs float64 may not exceed twice PyTorch's in the same precision."""
    worse = [p for p, (pt, fg) in errors.items() if not fg <= 2 * pt]
    if worse:
        print(f"\nverdict: FAIL: facegen's error exceeds twice PyTorch's in {', '.join(worse)}")
        sys.exit(1)
    print("\nverdict: OK: facegen's errors vs float64 are within twice PyTorch's in every precision")


if __name__ == "__main__":
    main()
