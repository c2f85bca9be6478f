#!/usr/bin/env python3
"""export_model.py: a generator's weights -> a safetensors file that facegen and PyTorch both read.

    python3 tools/export_model.py IN OUT.safetensors

IN is either
  - a PyTorch state_dict of the DCGAN tutorial's generator (torch.save(netG.state_dict(), ...); keys
    main.0.weight, main.1.weight, ..., a `module.` prefix from DataParallel accepted), read with
    torch.load(weights_only=True): the image size from the number of transposed convolutions (main.0,
    main.3, ..., main.3S: S = 3, 4 or 5 stride-2 ones after the first, 32x32, 64x64 or 128x128), nz, ngf
    and nc from the tensor shapes, the kernel size (4: the tutorial's "dcgan"; 5: the SHPC alignment,
    "shpc") from main.3.weight, biases from main.0.bias; or
  - a network.bin (the SHPC facegen network, exactly 20,549,132 bytes of float32), converted from its
    (in, out) and (kh, kw, out, in) layouts to PyTorch's.
OUT holds the tensors under PyTorch's own names and layouts (float32; num_batches_tracked int64) and
the architecture in __metadata__ (architecture, nz, ngf, nc, kernel_size, bias, image_size), so that
safetensors.torch.load_file + load_state_dict work; it is written atomically (a temporary file in the
same folder, then a rename). The format is written here in plain Python: an 8-byte little-endian
header length, the JSON header (padded with spaces to a multiple of 8), then the data.
Anything else is refused in one sentence naming the key or shape, with exit status 1.

Requirements: Python 3.8 or later with numpy (Debian: python3-numpy; pip: numpy); reading a PyTorch
file needs torch too (pip: torch), a network.bin does not. A Python without them gets one sentence
saying what to install, with exit status 1.
"""

import json
import os
import re
import struct
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print(f"export_model: error: this script needs numpy, which the Python at {sys.executable} lacks: install "
          f"it (Debian: apt install python3-numpy; else: {os.path.basename(sys.executable)} -m pip install numpy)",
          file=sys.stderr)
    sys.exit(1)

SHPC_BYTES = 20549132  # network.bin: 5,137,283 float32 values
SHPC_NZ, SHPC_NGF, SHPC_NC = 100, 64, 3
IMAGE_SIZES = {3: 32, 4: 64, 5: 128}  # stride-2 transposed convolutions -> pixels a side
MAX_FIRST_CHANNELS = 2048  # C0, the widest feature map facegen runs


class ExportError(Exception):
    """A problem with the input, said in one sentence."""


def generator_keys(kernel, has_bias, stages=4):
    """The tensor names of the generator, in state_dict order, with the role of each."""
    keys = ["main.0.weight"] + (["main.0.bias"] if has_bias else [])
    for i in range(stages):
        bn = f"main.{3 * i + 1}"
        keys += [f"{bn}.weight", f"{bn}.bias", f"{bn}.running_mean", f"{bn}.running_var", f"{bn}.num_batches_tracked"]
        conv = f"main.{3 * i + 3}"
        keys += [f"{conv}.weight"] + ([f"{conv}.bias"] if has_bias else [])
    return keys


def stage_channels(ngf, nc, stages):
    """C_0 .. C_S: ngf * 2^(S-1), ..., 2 ngf, ngf, then nc."""
    return [ngf << (stages - 1 - i) for i in range(stages)] + [nc]


def expected_shapes(nz, ngf, nc, kernel, has_bias, stages=4):
    """Key -> shape of the generator with these sizes."""
    c = stage_channels(ngf, nc, stages)
    shapes = {"main.0.weight": (nz, c[0], 4, 4)}
    if has_bias:
        shapes["main.0.bias"] = (c[0], 4, 4) if kernel == 5 else (c[0],)
    for i in range(stages):
        bn, conv = f"main.{3 * i + 1}", f"main.{3 * i + 3}"
        for part in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{bn}.{part}"] = (c[i],)
        shapes[f"{bn}.num_batches_tracked"] = ()
        shapes[f"{conv}.weight"] = (c[i], c[i + 1], kernel, kernel)
        if has_bias:
            shapes[f"{conv}.bias"] = (c[i + 1],)
    return shapes


def describe(nz, ngf, nc, kernel, has_bias, size=64):
    return (f"nz {nz}, ngf {ngf}, nc {nc}, {kernel}x{kernel} kernels, {'with' if has_bias else 'no'} biases, "
            f"{size}x{size} images")


def count_stages(path, tensors):
    """S, the stride-2 transposed convolutions after the first: main.3S.weight is the last 4-d main.{3j}.weight
    (a gap before it is a missing tensor, named when the shapes are checked)."""
    convs = sorted(int(m.group(1)) // 3 for key, value in tensors.items()
                   if (m := re.fullmatch(r"main\.(\d+)\.weight", key)) and int(m.group(1)) % 3 == 0 and value.dim() == 4)
    stages = convs[-1] if convs else 0
    if stages not in IMAGE_SIZES:
        raise ExportError(f"{path}: its last transposed convolution is main.{3 * stages}.weight, so it has {stages + 1} "
                          "of them, but a generator facegen runs has 4, 5 or 6 (32x32, 64x64 or 128x128 images: the "
                          "first from 1x1 to 4x4, each next one stride 2)")
    return stages


def from_state_dict(path):
    """A torch.save'd state_dict -> (metadata, {key: numpy array}) after checking every key and shape."""
    try:
        import torch
    except ImportError:
        raise ExportError(f"{path} is not a network.bin, and reading a PyTorch file needs torch, which the Python "
                          f"at {sys.executable} lacks: install it ({os.path.basename(sys.executable)} -m pip install "
                          f"torch), or run this script with a Python that has it")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds for a file it cannot read
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportError(f"{path} is neither a network.bin ({SHPC_BYTES:,} bytes) nor a PyTorch file that "
                          f"torch.load(weights_only=True) reads: {first_line}")
    if not isinstance(state, dict):
        raise ExportError(f"{path} holds a {type(state).__name__}, but a generator's state_dict (a dict of tensors)"
                          " was expected")
    tensors = {}
    for key, value in state.items():
        if not isinstance(key, str) or not torch.is_tensor(value):
            hint = ""
            if isinstance(value, dict):  # a training checkpoint: {'netG': state_dict, 'optimizerG': ..., ...}
                hint = (f" (a checkpoint of several parts: save the generator's own state_dict, "
                        f"torch.save(ckpt[{key!r}], 'netG.pth'), and export that)")
            raise ExportError(f"{path}: entry {key!r} is a {type(value).__name__}, but a state_dict holds tensors{hint}")
        tensors[key[len("module."):] if key.startswith("module.") else key] = value
    if "main.0.weight" not in tensors:
        shown = ", ".join(list(tensors)[:6]) + (", ..." if len(tensors) > 6 else "")
        raise ExportError(f"{path} has no tensor main.0.weight (the DCGAN tutorial generator's first layer); "
                          f"its keys are {shown or 'none'}")
    first, third = tensors["main.0.weight"], tensors.get("main.3.weight")
    stages = count_stages(path, tensors)
    last_key = f"main.{3 * stages}.weight"
    last, widths = tensors[last_key], 1 << (stages - 1)  # C0 = ngf * widths
    if first.dim() != 4 or first.shape[2:] != (4, 4) or first.shape[1] % widths != 0:
        raise ExportError(f"{path}: main.0.weight has shape {tuple(first.shape)}, but the first layer of a generator of "
                          f"{IMAGE_SIZES[stages]}x{IMAGE_SIZES[stages]} images is (nz, {widths} ngf, 4, 4)")
    if third.shape[2] not in (4, 5):
        raise ExportError(f"{path}: main.3.weight has shape {tuple(third.shape)}, but its kernel must be 4x4 or 5x5")
    nz, ngf, nc, kernel = first.shape[0], first.shape[1] // widths, last.shape[1], third.shape[2]
    has_bias = "main.0.bias" in tensors
    expected = expected_shapes(nz, ngf, nc, kernel, has_bias, stages)
    what = f"the generator of {describe(nz, ngf, nc, kernel, has_bias, IMAGE_SIZES[stages])}"
    for key, shape in expected.items():
        if key not in tensors:
            if key.endswith("num_batches_tracked"):
                continue  # optional: loading without it works, and facegen does not use it
            raise ExportError(f"{path} has no tensor {key}, {shape} in {what}")
        if tuple(tensors[key].shape) != shape:
            raise ExportError(f"{path}: {key} has shape {tuple(tensors[key].shape)}, but {what} has {shape}")
    for key in tensors:
        if key not in expected:
            raise ExportError(f"{path} has a tensor {key} that {what} does not have")
    arrays = {}
    for key in generator_keys(kernel, has_bias, stages):
        if key.endswith("num_batches_tracked"):
            value = tensors.get(key, torch.tensor(0, dtype=torch.int64))
            arrays[key] = np.asarray(value.to(torch.int64).numpy(), dtype="<i8")
            continue
        value = tensors[key]
        if not value.is_floating_point():
            raise ExportError(f"{path}: {key} is {value.dtype}, but the generator's weights are floating point")
        arrays[key] = value.detach().to(torch.float32).numpy().astype("<f4", order="C")
    return metadata(nz, ngf, nc, kernel, has_bias, IMAGE_SIZES[stages]), arrays


def from_network_bin(path):
    """network.bin -> (metadata, {key: numpy array}) in PyTorch's layouts (see generator/network.hpp)."""
    flat = np.fromfile(path, dtype="<f4")
    c = [512, 256, 128, 64, 3]
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        block = flat[pos:pos + n].reshape(shape)
        pos += n
        return block

    arrays = {}
    # proj weight (100, 8192) = (in, (y, x, o)) -> (in, o, y, x); bias (8192) = (y, x, o) -> (o, y, x)
    arrays["main.0.weight"] = take(SHPC_NZ, 4, 4, c[0]).transpose(0, 3, 1, 2)
    arrays["main.0.bias"] = take(4, 4, c[0]).transpose(2, 0, 1)
    for i in range(4):
        bn, conv = f"main.{3 * i + 1}", f"main.{3 * i + 3}"
        arrays[f"{bn}.bias"] = take(c[i])  # beta, gamma, mean, var in the file
        arrays[f"{bn}.weight"] = take(c[i])
        arrays[f"{bn}.running_mean"] = take(c[i])
        arrays[f"{bn}.running_var"] = take(c[i])
        arrays[f"{bn}.num_batches_tracked"] = np.zeros((), dtype="<i8")
        arrays[f"{conv}.weight"] = take(5, 5, c[i + 1], c[i]).transpose(3, 2, 0, 1)  # (kh, kw, out, in) -> (in, out, kh, kw)
        arrays[f"{conv}.bias"] = take(c[i + 1])
    assert pos == flat.size, (pos, flat.size)
    ordered = {key: arrays[key].copy(order="C") for key in generator_keys(5, True)}  # 0-d stays 0-d
    return metadata(SHPC_NZ, SHPC_NGF, SHPC_NC, 5, True), ordered


def metadata(nz, ngf, nc, kernel, has_bias, size=64):
    return {"format": "pt", "architecture": "dcgan" if kernel == 4 else "shpc", "nz": str(nz), "ngf": str(ngf),
            "nc": str(nc), "kernel_size": str(kernel), "bias": "true" if has_bias else "false",
            "image_size": str(size)}


def check_values(path, meta, arrays):
    """What facegen refuses, refused here first: NaN or Inf, a batch-norm variance + 1e-5 <= 0, sizes it
    does not run."""
    nz, ngf, nc, size = int(meta["nz"]), int(meta["ngf"]), int(meta["nc"]), int(meta["image_size"])
    if not 1 <= nz <= 1024:
        raise ExportError(f"{path}: nz is {nz}, but facegen runs nz 1 to 1024")
    if not (16 <= ngf <= 256 and ngf % 16 == 0):
        raise ExportError(f"{path}: ngf is {ngf}, but facegen runs ngf a multiple of 16 from 16 to 256")
    first = ngf * size // 8  # C0 = ngf * 2^(S-1), S = log2(size) - 2
    if first > MAX_FIRST_CHANNELS:
        raise ExportError(f"{path}: ngf is {ngf}, so the first layer of this {size}x{size} generator has {first} "
                          f"channels, but facegen runs at most {MAX_FIRST_CHANNELS} (ngf at most "
                          f"{MAX_FIRST_CHANNELS * 8 // size} at this size)")
    if nc not in (1, 3):
        raise ExportError(f"{path}: nc is {nc}, but facegen runs nc 1 (grey) or 3 (RGB)")
    for key, a in arrays.items():
        if a.dtype.kind != "f":
            continue
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            index = tuple(int(i) for i in np.unravel_index(bad[0], a.shape))
            raise ExportError(f"{path}: {key} element {list(index)} is {a.flat[bad[0]]}, but weights must be finite")
        if key.endswith("running_var"):
            low = np.flatnonzero(~(a + np.float32(1e-5) > 0))
            if low.size:
                raise ExportError(f"{path}: {key} element [{int(low[0])}] is {a.flat[low[0]]}, but a batch-norm "
                                  "variance plus 1e-5 must be positive")


def safetensors_bytes(meta, arrays):
    """The file: header length, JSON header padded to a multiple of 8 bytes, then the tensors in order."""
    header, offset = {"__metadata__": meta}, 0
    for key, a in arrays.items():
        dtype = {"<f4": "F32", "<i8": "I64"}[a.dtype.str]
        header[key] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(a.tobytes() for a in arrays.values())


def write_atomically(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def export(source, target):
    if not re.search(r"\.safetensors$", target):
        raise ExportError(f"the output {target} must end in .safetensors")
    if not os.path.isfile(source):
        raise ExportError(f"{source} is not a file")
    with open(source, "rb") as f:
        start = f.read(4)
    # torch.save writes a zip archive (or, before PyTorch 1.6, a pickle); network.bin is raw floats.
    is_torch_file = start.startswith(b"PK\x03\x04") or start[:1] == b"\x80"
    if os.path.getsize(source) == SHPC_BYTES and not is_torch_file:
        meta, arrays = from_network_bin(source)
    elif is_torch_file:
        meta, arrays = from_state_dict(source)
    else:
        raise ExportError(f"{source} is neither a network.bin ({SHPC_BYTES:,} bytes, it has "
                          f"{os.path.getsize(source):,}) nor a PyTorch state_dict saved by torch.save")
    check_values(source, meta, arrays)
    write_atomically(target, safetensors_bytes(meta, arrays))
    return meta


def main(argv):
    if len(argv) != 3 or argv[1].startswith("-"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        meta = export(argv[1], argv[2])
    except (ExportError, OSError) as e:
        print(f"export_model: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {argv[2]}: architecture {meta['architecture']}, "
          f"{describe(int(meta['nz']), int(meta['ngf']), int(meta['nc']), int(meta['kernel_size']), meta['bias'] == 'true', int(meta['image_size']))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
