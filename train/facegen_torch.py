"""facegen_torch.py: the facegen DCGAN generator in PyTorch, and network.bin <-> module.

network.bin (SHPC facegen layout) is headerless little-endian float32, 5,137,283 floats, in this order:
  proj weight (100, 8192) stored (in, out), proj bias (8192)
  bn0 beta, gamma, mean, var (512 each)
  tconv1 weight (5, 5, 256, 512) stored (kh, kw, out, in), bias (256)
  bn1 (256 each), tconv2 (5, 5, 128, 256) + (128), bn2 (128 each), tconv3 (5, 5, 64, 128) + (64),
  bn3 (64 each), tconv4 (5, 5, 3, 64) + (3)

Forward for latents z (N, 100): x = z @ W + b viewed as (N, 4, 4, 512), (H, W, C), C fastest; for i = 0..3:
x = tconv_{i+1}(relu(bn_i(x))); then tanh -> (N, 64, 64, 3). The module computes in NCHW:
ConvTranspose2d(C, K, 5, stride=2, padding=1) puts input (i, j) tap (kh, kw) at output (2i+kh-1, 2j+kw-1)
and gives 2H+1 rows; the file's layer keeps the first 2H, so the last row and column are cropped.

Weight mapping: file tconv W[kh][kw][k][c] = torch weight[c][k][kh][kw]; file proj W[i][o] = torch
Linear weight[o][i]. The torch projection output index o = (h*4 + w)*512 + c.
"""

import os

import numpy as np
import torch
from torch import nn

LATENT_DIM = 100
STAGE_CHANNELS = (512, 256, 128, 64, 3)
BN_EPS = 1e-5
NETWORK_FLOATS = 5137283


class FacegenGenerator(nn.Module):
    """(N, 100) latents -> (N, 3, 64, 64) images in [-1, 1]."""

    def __init__(self):
        super().__init__()
        c = STAGE_CHANNELS
        self.proj = nn.Linear(LATENT_DIM, 4 * 4 * c[0])
        self.bns = nn.ModuleList([nn.BatchNorm2d(c[i], eps=BN_EPS) for i in range(4)])
        self.tconvs = nn.ModuleList(
            [nn.ConvTranspose2d(c[i], c[i + 1], 5, stride=2, padding=1) for i in range(4)])

    def forward(self, z):
        # (N, 8192) -> (N, 4, 4, 512) in the file's HWC order -> NCHW
        x = self.proj(z).view(-1, 4, 4, STAGE_CHANNELS[0]).permute(0, 3, 1, 2)
        for bn, tconv in zip(self.bns, self.tconvs):
            x = tconv(torch.relu(bn(x)))
            x = x[:, :, :-1, :-1]  # (N, K, 2H+1, 2W+1) -> (N, K, 2H, 2W)
        return torch.tanh(x)


def init_dcgan_(gen, seed=None):
    """The DCGAN paper's init: weights N(0, 0.02), batch-norm gamma N(1, 0.02), biases 0."""
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    with torch.no_grad():
        for m in gen.modules():
            if isinstance(m, (nn.Linear, nn.ConvTranspose2d, nn.Conv2d)):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(1.0 + torch.randn(m.weight.shape, generator=g) * 0.02)
                m.bias.zero_()
    return gen


def _blocks(gen):
    """Yields (name, torch tensor, to_file, from_file) in file order; to_file maps the torch layout to
    the file layout (a numpy array), from_file the reverse."""
    ident = (lambda a: a, lambda a: a)
    yield ("proj.weight", gen.proj.weight, lambda a: a.T, lambda a: a.T)  # (out, in) <-> (in, out)
    yield ("proj.bias", gen.proj.bias) + ident
    for i in range(4):
        bn, tc = gen.bns[i], gen.tconvs[i]
        yield (f"bn{i}.beta", bn.bias) + ident
        yield (f"bn{i}.gamma", bn.weight) + ident
        yield (f"bn{i}.mean", bn.running_mean) + ident
        yield (f"bn{i}.var", bn.running_var) + ident
        # torch (c, k, kh, kw) <-> file (kh, kw, k, c)
        yield (f"tconv{i + 1}.weight", tc.weight,
               lambda a: a.transpose(2, 3, 1, 0), lambda a: a.transpose(3, 2, 0, 1))
        yield (f"tconv{i + 1}.bias", tc.bias) + ident


def _file_shape(name, tensor):
    if name == "proj.weight":
        return (tensor.shape[1], tensor.shape[0])
    if name.endswith("weight") and name.startswith("tconv"):
        c, k, kh, kw = tensor.shape
        return (kh, kw, k, c)
    return tuple(tensor.shape)


def generator_to_array(gen):
    """The module's parameters and batch-norm running statistics as the file's (5,137,283,) float32."""
    parts = []
    for name, tensor, to_file, _ in _blocks(gen):
        a = tensor.detach().to("cpu", torch.float32).numpy()
        parts.append(np.ascontiguousarray(to_file(a)).reshape(-1))
    flat = np.concatenate(parts).astype("<f4", copy=False)
    assert flat.size == NETWORK_FLOATS, flat.size
    return flat


def array_to_generator(flat, gen=None):
    """Fills (or makes) a FacegenGenerator from the file's float array; returns it in eval mode."""
    flat = np.asarray(flat)
    if flat.size != NETWORK_FLOATS:
        raise ValueError(f"expected {NETWORK_FLOATS} floats, got {flat.size}")
    gen = gen if gen is not None else FacegenGenerator()
    pos = 0
    with torch.no_grad():
        for name, tensor, _, from_file in _blocks(gen):
            shape = _file_shape(name, tensor)
            n = int(np.prod(shape))
            block = flat[pos:pos + n].reshape(shape)
            tensor.copy_(torch.from_numpy(np.ascontiguousarray(from_file(block))).to(tensor.dtype))
            pos += n
    assert pos == NETWORK_FLOATS
    return gen.eval()


def load_network(path, dtype=torch.float32):
    """network.bin -> FacegenGenerator (eval mode, on the CPU, in `dtype`)."""
    flat = np.fromfile(path, dtype="<f4")
    if flat.size != NETWORK_FLOATS or flat.nbytes != os.path.getsize(path):
        raise ValueError(f"{path}: expected {NETWORK_FLOATS * 4} bytes, got {os.path.getsize(path)}")
    return array_to_generator(flat).to(dtype)


def save_network(gen, path):
    """FacegenGenerator -> network.bin (float32, file order, batch-norm running statistics)."""
    generator_to_array(gen).tofile(path)


def _self_test():
    """Round trip: random file -> module -> file must be byte-identical, and the module's forward must
    match a direct float64 loop of the file's formula on a few latents."""
    rng = np.random.default_rng(7)
    flat = rng.standard_normal(NETWORK_FLOATS).astype("<f4")
    # keep batch-norm variances positive, as real files have them
    gen = FacegenGenerator()
    offsets = {}
    pos = 0
    for name, tensor, _, _ in _blocks(gen):
        n = tensor.numel()
        offsets[name] = (pos, n)
        pos += n
    for i in range(4):
        p, n = offsets[f"bn{i}.var"]
        flat[p:p + n] = np.abs(flat[p:p + n]) + 0.5
    gen = array_to_generator(flat)
    back = generator_to_array(gen)
    assert back.tobytes() == flat.tobytes(), "round trip changed the bytes"

    # scale weights by 1/sqrt(fan-in) so activations stay O(1) and the comparison means something;
    # a stride-2 5x5 tconv output sums about 25/4 taps of every input channel
    scaled = flat.copy()
    for name, (p, n) in offsets.items():
        if name.endswith("weight"):
            fan_in = LATENT_DIM if name == "proj.weight" else STAGE_CHANNELS[int(name[5]) - 1] * 25 / 4
            scaled[p:p + n] *= 1.0 / np.sqrt(fan_in)
    gen64 = array_to_generator(scaled).double()
    z = rng.standard_normal((2, LATENT_DIM))
    with torch.no_grad():
        got = gen64(torch.from_numpy(z)).permute(0, 2, 3, 1).numpy()
    want = _reference_forward(scaled.astype(np.float64), offsets, z)
    err = np.abs(got - want).max()
    assert err < 1e-10, err
    print(f"facegen_torch self-test: round trip exact, forward vs float64 loop max err {err:.2e}")


def _reference_forward(flat, offsets, z):
    """The file's formula in plain numpy (float64), (N, 64, 64, 3)."""
    def block(name, shape):
        p, n = offsets[name]
        return flat[p:p + n].reshape(shape)

    x = z @ block("proj.weight", (100, 8192)) + block("proj.bias", (8192,))
    x = x.reshape(-1, 4, 4, 512)
    for i in range(4):
        c, k = STAGE_CHANNELS[i], STAGE_CHANNELS[i + 1]
        beta, gamma = block(f"bn{i}.beta", (c,)), block(f"bn{i}.gamma", (c,))
        mean, var = block(f"bn{i}.mean", (c,)), block(f"bn{i}.var", (c,))
        x = np.maximum((x - mean) / np.sqrt(var + BN_EPS) * gamma + beta, 0.0)
        w = block(f"tconv{i + 1}.weight", (5, 5, k, c))
        n, h = x.shape[0], x.shape[1]
        out = np.zeros((n, 2 * h + 4, 2 * h + 4, k))  # 1 row of slack before, 3 after
        for kh in range(5):
            for kw in range(5):
                contrib = x @ w[kh, kw].T  # (n, h, h, k)
                out[:, kh:kh + 2 * h:2, kw:kw + 2 * h:2, :] += contrib
        # output row r = 2i + kh - 1 sits at out index r + 1
        x = out[:, 1:2 * h + 1, 1:2 * h + 1, :] + block(f"tconv{i + 1}.bias", (k,))
    return np.tanh(x)


if __name__ == "__main__":
    _self_test()
