"""tutorial_torch.py: the generator of PyTorch's DCGAN tutorial (and pytorch/examples' dcgan), as trained
for facegen's face model and saved as a state_dict.

    nn.Sequential `main`, state_dict keys main.0.weight, main.1.weight/bias/running_mean/running_var, ...
    (N, nz) latents viewed as (N, nz, 1, 1)
      ConvTranspose2d(nz, ngf*8, 4, 1, 0, bias=False), BatchNorm2d, ReLU   -> (N, ngf*8, 4, 4)
      ConvTranspose2d(ngf*8, ngf*4, 4, 2, 1, bias=False), BatchNorm2d, ReLU -> (N, ngf*4, 8, 8)
      ConvTranspose2d(ngf*4, ngf*2, 4, 2, 1, bias=False), BatchNorm2d, ReLU -> (N, ngf*2, 16, 16)
      ConvTranspose2d(ngf*2, ngf, 4, 2, 1, bias=False), BatchNorm2d, ReLU   -> (N, ngf, 32, 32)
      ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), Tanh                    -> (N, nc, 64, 64) in [-1, 1]

Batch norm eps 1e-5 (PyTorch's default).

At nz 100, ngf 64, nc 3 this network is also exactly a facegen network.bin (facegen_torch.py): the same
widths 512/256/128/64/3; the first layer, a 4x4 transposed convolution of a 1x1 input, is the linear
projection to (4, 4, 512); a 4x4 stride-2 padding-1 kernel puts tap kh of input row i at output row
2i + kh - 1, as the 5x5 SHPC kernel does for its taps 0..3, so it is that kernel with a zero fifth row
and column; every bias is 0. `as_facegen_network` builds that network and

    python3 train/tutorial_torch.py                          checks the state_dict round trip and the
                                                             equivalence in float64 on random weights
    python3 train/tutorial_torch.py --to-network-bin netG.pth OUT.bin     writes the network.bin
"""

import argparse
import os
import sys

import torch
from torch import nn

NZ, NGF, NC = 100, 64, 3


class TutorialGenerator(nn.Module):
    """(N, nz) or (N, nz, 1, 1) latents -> (N, nc, 64, 64) images in [-1, 1]."""

    def __init__(self, nz=NZ, ngf=NGF, nc=NC):
        super().__init__()
        self.nz = nz
        widths = (ngf * 8, ngf * 4, ngf * 2, ngf)
        layers = [nn.ConvTranspose2d(nz, widths[0], 4, 1, 0, bias=False), nn.BatchNorm2d(widths[0]),
                  nn.ReLU(True)]
        for c_in, c_out in zip(widths, widths[1:]):
            layers += [nn.ConvTranspose2d(c_in, c_out, 4, 2, 1, bias=False), nn.BatchNorm2d(c_out),
                       nn.ReLU(True)]
        layers += [nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh()]
        self.main = nn.Sequential(*layers)

    def forward(self, z):
        return self.main(z.view(z.shape[0], self.nz, 1, 1))


def save_state_dict(gen, path):
    """torch.save of a float32 CPU copy of the state_dict: what a PyTorch user's netG.pth holds."""
    state = {k: v.detach().float().cpu().contiguous() for k, v in gen.state_dict().items()}
    torch.save(state, path)


def load_state_dict_file(path):
    """A TutorialGenerator (eval mode) from a netG.pth; nz, ngf and nc come from the tensor shapes and a
    DataParallel `module.` prefix is accepted."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    first, last = state["main.0.weight"], state["main.12.weight"]  # (nz, ngf*8, 4, 4), (ngf, nc, 4, 4)
    gen = TutorialGenerator(nz=first.shape[0], ngf=last.shape[0], nc=last.shape[1])
    gen.load_state_dict(state)
    return gen.eval()


def as_facegen_network(tut):
    """TutorialGenerator (nz 100, ngf 64, nc 3) -> the facegen_torch.FacegenGenerator computing the same
    function (eval mode, float32): weights re-laid, fifth kernel rows and columns and all biases 0."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import facegen_torch as ft
    first, last = tut.main[0].weight, tut.main[12].weight  # (nz, 512, 4, 4), (64, nc, 4, 4)
    if first.shape != (ft.LATENT_DIM, 512, 4, 4) or last.shape != (64, 3, 4, 4):
        raise ValueError(f"only nz 100, ngf 64, nc 3 fit network.bin; this generator has nz {first.shape[0]}, "
                         f"ngf {last.shape[0]}, nc {last.shape[1]}")
    gen = ft.FacegenGenerator()
    with torch.no_grad():
        # projection output o = (h*4 + w)*512 + c  <-  main.0.weight[i, c, h, w]
        gen.proj.weight.copy_(first.permute(2, 3, 1, 0).reshape(4 * 4 * 512, ft.LATENT_DIM))
        gen.proj.bias.zero_()
        for i in range(4):
            bn, src_bn = gen.bns[i], tut.main[1 + 3 * i]
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(bn, name).copy_(getattr(src_bn, name))
            tconv, src = gen.tconvs[i], tut.main[3 + 3 * i].weight  # (c, k, 4, 4)
            tconv.weight.zero_()
            tconv.weight[:, :, :4, :4] = src
            tconv.bias.zero_()
    return gen.eval()


def _self_check():
    import tempfile
    torch.manual_seed(5)
    gen = TutorialGenerator(nz=7, ngf=16, nc=1)
    for m in gen.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
    gen.eval()
    z = torch.randn(3, 7)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "netG.pth")
        torch.save({"module." + k: v for k, v in gen.state_dict().items()}, path)
        back = load_state_dict_file(path)
    with torch.no_grad():
        a, b = gen(z), back(z)
    assert a.shape == (3, 1, 64, 64), a.shape
    assert torch.equal(a, b), "the reloaded generator differs"
    assert sorted(gen.state_dict())[0] == "main.0.weight"
    print("tutorial_torch.py: state_dict round trip exact, output (3, 1, 64, 64)")

    tut = TutorialGenerator()  # float32 weights, so that the float32 network.bin holds them exactly
    with torch.no_grad():
        for m in tut.modules():
            if isinstance(m, nn.ConvTranspose2d):
                m.weight.normal_(0.0, 1.0 / (m.weight.shape[0] * 4) ** 0.5)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.2)
                m.running_mean.normal_(0.0, 0.2)
                m.running_var.uniform_(0.5, 2.0)
    facegen = as_facegen_network(tut.eval()).double()
    tut = tut.double()
    z = torch.randn(5, NZ, dtype=torch.float64)
    with torch.no_grad():
        want, got = tut(z), facegen(z)
    err = (want - got).abs().max().item()
    assert err < 1e-12 and want.abs().max() > 0.1, err
    print(f"tutorial_torch.py: as a facegen network, max difference {err:.1e} in float64 on random weights")


def main():
    p = argparse.ArgumentParser(description="the PyTorch DCGAN tutorial generator; no arguments: self-check")
    p.add_argument("--to-network-bin", nargs=2, metavar=("NETG_PTH", "OUT_BIN"),
                   help="write a tutorial state_dict (nz 100, ngf 64, nc 3) as a facegen network.bin")
    args = p.parse_args()
    if not args.to_network_bin:
        return _self_check()
    src, dst = args.to_network_bin
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import facegen_torch as ft
    try:
        gen = as_facegen_network(load_state_dict_file(src))
    except (KeyError, RuntimeError, ValueError) as err:
        sys.exit(f"tutorial_torch.py: {src}: {err}")
    ft.save_network(gen, dst)
    print(f"tutorial_torch.py: wrote {dst}")


if __name__ == "__main__":
    main()
