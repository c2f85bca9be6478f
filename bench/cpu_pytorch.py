#!/usr/bin/python3
"""cpu_pytorch.py: the generator in PyTorch on the CPU, for `make bench-cpu` to set beside facegen.

Three forms, each checked against eager float64 PyTorch before it is timed (worst |difference| on
the first 8 images, within 1e-4 or the script exits non-zero):
  eager        bench/pytorch_reference.py's Generator: Linear, BatchNorm2d, ConvTranspose2d, tanh
  pixelshuffle the same network rewritten as each transposed convolution's four output phases in
               one 3x3 Conv2d (4 x c_out outputs, unused taps zero) + pixel_shuffle, batch norm
               folded in, traced, frozen and optimised for inference (oneDNN convolutions)
  onednn-conv  the pixelshuffle form's four convolutions alone on oneDNN tensors with weights
               reordered in advance: the practical ceiling of oneDNN here, in FLOP/s of the 3x3
               convolutions (36 taps per output phase group where 25 are useful)
Prints one line per form: "RESULT <form> <images/s> <GFLOP/s> <images per CPU-second>", GFLOP/s at
326 MFLOP per image except onednn-conv, which counts its own multiply-adds.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_reference import CH, EPS, SIZE, Generator, load_params  # noqa: E402

IMAGE_FLOPS = 326e6


def folded_bn(p, s):
    beta, gamma, mean, var = [t.double() for t in p[f"bn{s}"]]
    scale = gamma / torch.sqrt(var + EPS)
    return scale, beta - mean * scale


class PixelShuffleGenerator(torch.nn.Module):
    """Transposed convolution (c_in -> c_out, 5x5, stride 2, SAME) as a 3x3 convolution to 4 c_out
    channels, channel k * 4 + py * 2 + px holding output phase (py, px), then pixel_shuffle(2)."""

    def __init__(self, p):
        super().__init__()
        scale, shift = folded_bn(p, 0)
        w = p["proj_w"].double().view(100, 4, 4, 512) * scale
        self.proj_w = (w.permute(0, 3, 1, 2).reshape(100, 8192)).float()  # outputs as (512, 4, 4)
        b = p["proj_b"].double().view(4, 4, 512) * scale + shift
        self.proj_b = b.permute(2, 0, 1).reshape(8192).float()
        self.convs = torch.nn.ModuleList()
        for s in range(4):
            c, k = CH[s], CH[s + 1]
            wt = p[f"w{s}"].double()  # (c_in, c_out, 5, 5)
            bias = p[f"b{s}"].double()
            if s < 3:
                scale, shift = folded_bn(p, s + 1)
            else:
                scale, shift = torch.ones(k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)
            w3 = torch.zeros(k, 2, 2, c, 3, 3, dtype=torch.float64)
            for py in range(2):
                for px in range(2):
                    for a in range(3):  # input row i + a - 1 reaches output 2i + py through tap kh
                        kh = py + 1 - 2 * (a - 1)
                        for b_ in range(3):
                            kw = px + 1 - 2 * (b_ - 1)
                            if 0 <= kh < 5 and 0 <= kw < 5:
                                w3[:, py, px, :, a, b_] = wt[:, :, kh, kw].t()
            w3 = w3 * scale.view(k, 1, 1, 1, 1, 1)
            conv = torch.nn.Conv2d(c, 4 * k, 3, padding=1)
            conv.weight.data = w3.reshape(4 * k, c, 3, 3).float()
            conv.bias.data = (bias * scale + shift).repeat_interleave(4).float()
            self.convs.append(conv)
        self.eval()

    def forward(self, z):
        x = F.relu(F.linear(z, self.proj_w.t().contiguous(), self.proj_b)).view(-1, 512, 4, 4)
        for s in range(4):
            x = F.pixel_shuffle(self.convs[s](x), 2)
            x = F.relu(x) if s < 3 else torch.tanh(x)
        return x.permute(0, 2, 3, 1)


def best_images_per_s(fn, z, rounds, min_seconds=1.0):
    """Best of `rounds`: images per second of wall time, and per second of this process's CPU time
    (all its threads), which a busy machine disturbs less."""
    with torch.no_grad():
        fn(z)
        best, best_cpu = 0.0, 0.0
        for _ in range(rounds):
            reps, start, cpu0 = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - start < min_seconds:
                fn(z)
                reps += 1
            best = max(best, z.shape[0] * reps / (time.perf_counter() - start))
            best_cpu = max(best_cpu, z.shape[0] * reps / (time.process_time() - cpu0))
    return best, best_cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="build/random-network.bin")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    p = load_params(args.model)
    z = torch.randn(args.batch, 100, generator=torch.Generator().manual_seed(5))
    print(f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}, "
          f"oneDNN {torch.backends.mkldnn.is_available()}")
    eager = Generator(p)
    shuffled = PixelShuffleGenerator(p)
    with torch.no_grad():
        ref = Generator(p).double()(z[:8].double())
        frozen = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(shuffled, z)))
    ok = True
    for name, model in (("eager", eager), ("pixelshuffle", frozen)):
        with torch.no_grad():
            err = (model(z[:8]).double() - ref).abs().max().item()
        print(f"check {name}: largest difference from float64 {err:.2g}")
        ok = ok and err <= 1e-4
    if not ok:
        print("check: FAILED")
        sys.exit(1)
    print("check: OK")
    rate, per_cpu = best_images_per_s(eager, z[:16], args.rounds)  # eager is slow: a smaller batch
    print(f"RESULT eager {rate:.1f} {rate * IMAGE_FLOPS / 1e9:.1f} {per_cpu:.1f}")
    rate, per_cpu = best_images_per_s(frozen, z, args.rounds)
    print(f"RESULT pixelshuffle {rate:.1f} {rate * IMAGE_FLOPS / 1e9:.1f} {per_cpu:.1f}")

    # The four convolutions alone, oneDNN tensors in and out, weights reordered once.
    from torch.utils import mkldnn as mkldnn_utils
    convs = [mkldnn_utils.to_mkldnn(c) for c in shuffled.convs]
    inputs = [torch.randn(args.batch, CH[s], SIZE[s], SIZE[s]).to_mkldnn() for s in range(4)]
    conv_flops = sum(2 * 9 * CH[s] * 4 * CH[s + 1] * SIZE[s] ** 2 for s in range(4))
    rate, per_cpu = best_images_per_s(lambda _: [c(x) for c, x in zip(convs, inputs)], z, args.rounds)
    print(f"RESULT onednn-conv {rate:.1f} {rate * conv_flops / 1e9:.1f} {per_cpu:.1f}")


if __name__ == "__main__":
    main()
