"""tutorial_torch.py: the generator of PyTorch's DCGAN tutorial (and pytorch/examples' dcgan), as trained
for facegen's face model and saved as a state_dict.

    nn.Sequential `main`, state_dict keys main.0.weight, main.1.weight/bias/running_mean/running_var, ...
    (N, nz) latents viewed as (N, nz, 1, 1)
      ConvTranspose2d(nz, ngf*8, 4, 1, 0, bias=False), BatchNorm2d, ReLU   -> (N, ngf*8, 4, 4)
      ConvTranspose2d(ngf*8, ngf*4, 4, 2, 1, bias=False), BatchNorm2d, ReLU -> (N, ngf*4, 8, 8)
      ConvTranspose2d(ngf*4, ngf*2, 4, 2, 1, bias=False), BatchNorm2d, ReLU -> (N, ngf*2, 16, 16)
      ConvTranspose2d(ngf*2, ngf, 4, 2, 1, bias=False), BatchNorm2d, ReLU   -> (N, ngf, 32, 32)
      ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), Tanh                    -> (N, nc, 64, 64) in [-1, 1]

Batch norm eps 1e-5 (PyTorch's default). `python3 tutorial_torch.py` checks the state_dict round trip
and the output shape.
"""

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


def _self_check():
    import tempfile, os
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


if __name__ == "__main__":
    _self_check()
