"""train_dcgan.py: trains a DCGAN generator, facegen's own layout (exported as network.bin) or the PyTorch
DCGAN tutorial's (saved as a state_dict, netG.pth).

    python3 train_dcgan.py --data fashion --data-dir DIR --minutes 6 --out OUTDIR
    python3 train_dcgan.py --data emoji   --data-dir DIR --epochs 200 --out OUTDIR
    python3 train_dcgan.py --data faces   --data-dir DIR --arch tutorial --minutes 7 --out OUTDIR
    python3 train_dcgan.py --data fashion --data-dir DIR --eval-only --generator F.bin --out OUTDIR

Data, all as (N, 3, 64, 64) in [-1, 1]:
  fashion: Debian's dataset-fashion-mnist, DIR holds train-images-idx3-ubyte.gz etc. 28x28 gray, white
           object on black: padded by 2 to 32x32 (black), upscaled 2x bilinear, replicated to 3 channels.
  emoji:   npm's emoji-datasource-google img/google/64, DIR holds the 64x64 RGBA PNGs, composited onto
           white (the background they are drawn for); random horizontal flips while training.
  faces:   DiceBear avataaars cartoon faces made by make_faces.py, DIR holds faces-images.u8.xz and
           faces-labels.json; the held-out faces are kept for the metrics, never trained on.

Architectures (--arch): facegen, the generator of facegen_torch.py (5x5 kernels, SHPC layout); tutorial,
the generator of tutorial_torch.py (PyTorch's DCGAN tutorial: 4x4 kernels, no biases, ngf 64).

Recipe: the generator of --arch; a discriminator that mirrors it (stride-2 convolutions of the generator's
kernel size, 3 -> 64 -> 128 -> 256 -> 512, LeakyReLU 0.2, then a linear layer to one logit), normalised by
batch norm
after every convolution but the first (--d-norm bn, the DCGAN paper's) or by spectral norm on every layer
(--d-norm sn); weights N(0, 0.02); Adam lr 2e-4, betas (0.5, 0.999); BCE with logits, non-saturating
generator loss, real images' target 0.9 (one-sided label smoothing, --real-label); latents z ~ N(0, I)
of 100; batch 128; fp32 with TF32 (--amp 1: bf16 autocast). Training stops at --epochs or --minutes,
whichever comes first. The exported generator is an exponential moving average of the trained one
(--ema), whose batch-norm running statistics are measured afresh on random latents, so inference-mode
batch norm matches the final weights. For fashion and faces, the classifier below is trained first and
scores a snapshot every --judge-every seconds by the Frechet distance of its samples to training images;
the best snapshot is exported (the test or held-out set is never used to choose).

Writes to --out: network.bin (facegen) or netG.pth (tutorial), samples.png (8x8 mosaic),
interpolation.png (10 images along the spherical path between two latents), metrics.json. For fashion it
also trains a small CNN classifier on the real training set and reports, for 10,000 generated images, for
real images and for a random generator: the share classified with max softmax > 0.9, and the Frechet
distance of the classifier's penultimate features to those of the real test set. For faces the
classifier has one head per generating option of the avatars (skin colour, hair style, accessories, ...)
and the report gives, on as many images as are held out, each head's share with max softmax > 0.9, the
share confident on every head, and the Frechet distance to the held-out faces.

The seed fixes initialisation, data order and latents; cuDNN's autotuned kernels are not bitwise
deterministic, so two GPU runs agree only statistically.
"""

import argparse
import copy
import glob
import gzip
import json
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import facegen_torch as ft  # noqa: E402
import make_faces  # noqa: E402
import tutorial_torch as tt  # noqa: E402

FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


# ----------------------------------------------------------------------------------------------- data

def read_idx_gz(path):
    """An MNIST-style idx file (gzip): uint8 array of the shape its header gives."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an idx file of unsigned bytes")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims}, file holds {data.size} bytes")
    return data.reshape(dims)


def fashion_to_64(images, device, chunk=10000):
    """(N, 28, 28) uint8 -> (N, 1, 64, 64) float32 in [-1, 1] on `device`: pad to 32, upscale 2x."""
    out = []
    for s in range(0, len(images), chunk):
        x = torch.from_numpy(images[s:s + chunk].copy()).to(device).float().unsqueeze(1) / 127.5 - 1.0
        x = F.pad(x, (2, 2, 2, 2), value=-1.0)
        out.append(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))
    return torch.cat(out).clamp_(-1.0, 1.0)


def load_fashion(data_dir, split, device, limit=None):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx_gz(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx_gz(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if limit:
        images, labels = images[:limit], labels[:limit]
    return fashion_to_64(images, device), torch.from_numpy(labels.astype(np.int64)).to(device)


def load_emoji(data_dir, device, limit=None):
    """(N, 1 or 3, 64, 64) RGBA PNGs composited onto white -> (N, 3, 64, 64) in [-1, 1]."""
    from PIL import Image
    paths = sorted(glob.glob(os.path.join(data_dir, "*.png")))
    if not paths:
        raise FileNotFoundError(f"no .png files in {data_dir}")
    if limit:
        paths = paths[:limit]
    arrays = []
    for p in paths:
        with Image.open(p) as im:
            im = im.convert("RGBA")
            if im.size != (64, 64):
                im = im.resize((64, 64), Image.LANCZOS)
            a = np.asarray(im, dtype=np.float32) / 255.0
        rgb, alpha = a[..., :3], a[..., 3:]
        arrays.append(rgb * alpha + (1.0 - alpha))  # over white
    x = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()
    return (x * 2.0 - 1.0).to(device)


def load_faces(data_dir, device, split, limit=None):
    """make_faces.py's set: split "train" (faces before held_out_from) or "held_out" ->
    (images (N, 3, 64, 64) float32 in [-1, 1] on `device`, labels {HEAD: (N,) int64}, heads {HEAD: values}).
    limit keeps the first `limit` faces of the split (tests)."""
    images, meta = make_faces.load_faces(data_dir)
    cut = meta["held_out_from"]
    rows = slice(0, cut) if split == "train" else slice(cut, meta["count"])
    images = images[rows][:limit]
    labels = {h: torch.tensor(v[rows][:limit], dtype=torch.int64, device=device)
              for h, v in meta["labels"].items()}
    out = []
    for s in range(0, len(images), 4096):  # (n, 64, 64, 3) uint8 -> (n, 3, 64, 64) float, chunk by chunk
        x = torch.from_numpy(images[s:s + 4096].copy()).to(device)
        out.append(x.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0))
    return torch.cat(out).contiguous(), labels, meta["heads"]


# -------------------------------------------------------------------------------------------- models

def make_generator(arch):
    return tt.TutorialGenerator() if arch == "tutorial" else ft.FacegenGenerator()


def save_generator(gen, arch, out_dir):
    """Writes the trained generator in its architecture's format; returns the path."""
    if arch == "tutorial":
        path = os.path.join(out_dir, "netG.pth")
        tt.save_state_dict(gen, path)
    else:
        path = os.path.join(out_dir, "network.bin")
        ft.save_network(gen.cpu(), path)
    return path


def load_generator(path):
    """network.bin or a tutorial state_dict (netG.pth), told apart by the file name's ending."""
    return tt.load_state_dict_file(path) if path.endswith((".pth", ".pt")) else ft.load_network(path)


class Discriminator(nn.Module):
    """(N, 3, 64, 64) -> (N,) logits; the generator mirrored. norm "bn": batch norm after every
    convolution but the first (the DCGAN paper's); "sn": spectral norm on every layer, no batch norm,
    which bounds how sharply the discriminator can separate real from fake and so keeps its gradients
    useful to the generator."""

    def __init__(self, norm="bn", kernel=5):
        super().__init__()
        if norm not in ("bn", "sn"):
            raise ValueError(f"norm must be bn or sn, got {norm}")
        padding = {4: 1, 5: 2}[kernel]  # halves the size exactly
        wrap = nn.utils.parametrizations.spectral_norm if norm == "sn" else (lambda m: m)
        chans = (3, 64, 128, 256, 512)
        layers = []
        for i in range(4):
            use_bn = norm == "bn" and i > 0
            layers.append(wrap(nn.Conv2d(chans[i], chans[i + 1], kernel, stride=2, padding=padding,
                                         bias=not use_bn)))
            if use_bn:
                layers.append(nn.BatchNorm2d(chans[i + 1]))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
        self.features = nn.Sequential(*layers)
        self.head = wrap(nn.Linear(4 * 4 * 512, 1))

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1)).squeeze(1)


class FashionClassifier(nn.Module):
    """(N, 3, 64, 64) in [-1, 1] -> 10 logits; features() gives the 256-d penultimate layer. Works on
    the channel mean at 32x32, which is all the information a Fashion-MNIST image holds."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(inplace=True))
        self.dropout = nn.Dropout(0.3)
        self.out = nn.Linear(256, 10)

    def features(self, x):
        return self.body(F.avg_pool2d(x.mean(1, keepdim=True), 2))

    def forward(self, x):
        return self.out(self.dropout(self.features(x)))


class FaceClassifier(nn.Module):
    """(N, 3, 64, 64) in [-1, 1] -> {HEAD: logits}, one head per generating option of the avatars;
    features() gives the shared 256-d penultimate layer. Colour matters (skin, hair), so it sees RGB."""

    def __init__(self, head_sizes):
        super().__init__()
        def block(c_in, c_out):
            return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(inplace=True),
                    nn.Conv2d(c_out, c_out, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        self.body = nn.Sequential(*block(3, 32), *block(32, 64), *block(64, 128),  # -> (N, 128, 8, 8)
                                  nn.Flatten(), nn.Linear(128 * 8 * 8, 256), nn.ReLU(inplace=True))
        self.dropout = nn.Dropout(0.3)
        self.heads = nn.ModuleDict({h: nn.Linear(256, n) for h, n in head_sizes.items()})

    def features(self, x):
        return self.body(x)

    def logits(self, f):
        return {h: head(f) for h, head in self.heads.items()}

    def forward(self, x):
        return self.logits(self.dropout(self.features(x)))


def init_weights_(module):
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            # under spectral norm, .weight is computed; initialise the stored one
            weight = (m.parametrizations.weight.original
                      if nn.utils.parametrize.is_parametrized(m, "weight") else m.weight)
            nn.init.normal_(weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)


@torch.no_grad()
def recalibrate_batchnorm(gen, device, seed, batches, batch):
    """Sets every batch norm's running mean/var to the average over `batches` random-latent batches."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    saved = []
    for m in gen.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            saved.append((m, m.momentum))
            m.momentum = None  # cumulative average
    gen.train()
    for _ in range(batches):
        gen(torch.randn(batch, ft.LATENT_DIM, generator=g).to(device))
    for m, momentum in saved:
        m.momentum = momentum
    return gen.eval()


# -------------------------------------------------------------------------------------------- images

def to_uint8_hwc(images):
    """(N, 3, 64, 64) in [-1, 1] -> (N, 64, 64, 3) uint8."""
    x = ((images.detach().float().cpu().clamp(-1, 1) + 1.0) * 127.5).round().to(torch.uint8)
    return x.permute(0, 2, 3, 1).numpy()


def save_grid(images, path, cols, pad=2, pad_value=255):
    from PIL import Image
    tiles = to_uint8_hwc(images)
    n, h, w, c = tiles.shape
    rows = (n + cols - 1) // cols
    canvas = np.full((rows * (h + pad) + pad, cols * (w + pad) + pad, c), pad_value, np.uint8)
    for i in range(n):
        r, q = divmod(i, cols)
        y, x = pad + r * (h + pad), pad + q * (w + pad)
        canvas[y:y + h, x:x + w] = tiles[i]
    Image.fromarray(canvas).save(path, optimize=True)


def slerp(z0, z1, t):
    """Spherical interpolation between latents z0, z1 (each (100,)) at fractions t (T,)."""
    omega = torch.arccos(torch.clamp(torch.dot(z0 / z0.norm(), z1 / z1.norm()), -1.0, 1.0))
    so = torch.sin(omega)
    t = t[:, None]
    return torch.sin((1.0 - t) * omega) / so * z0 + torch.sin(t * omega) / so * z1


def write_images(gen, out_dir, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    z = torch.randn(64, ft.LATENT_DIM, generator=g)
    ends = torch.randn(2, ft.LATENT_DIM, generator=g)
    path = slerp(ends[0], ends[1], torch.linspace(0.0, 1.0, 10))
    with torch.no_grad():
        save_grid(gen(z.to(device)), os.path.join(out_dir, "samples.png"), cols=8)
        save_grid(gen(path.to(device)), os.path.join(out_dir, "interpolation.png"), cols=10)


# ------------------------------------------------------------------------------------------- metrics

def frechet_distance(feat_a, feat_b):
    """||mu_a - mu_b||^2 + tr(Sa + Sb - 2 (Sa^1/2 Sb Sa^1/2)^1/2), in float64 with symmetric eigensolves."""
    a, b = np.asarray(feat_a, np.float64), np.asarray(feat_b, np.float64)
    mu_a, mu_b = a.mean(0), b.mean(0)
    sa, sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    w, v = np.linalg.eigh(sa)
    sa_half = (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T
    m = sa_half @ sb @ sa_half
    cross = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2.0), 0.0, None)).sum()
    return max(0.0, float(((mu_a - mu_b) ** 2).sum() + np.trace(sa) + np.trace(sb) - 2.0 * cross))


def train_classifier(train_x, train_y, test_x, test_y, device, epochs, seed, log):
    torch.manual_seed(seed)
    clf = FashionClassifier().to(device)
    opt = torch.optim.Adam(clf.parameters(), lr=1e-3)
    n = len(train_x)
    for epoch in range(epochs):
        clf.train()
        perm = torch.randperm(n, device=device)
        for s in range(0, n, 256):
            idx = perm[s:s + 256]
            loss = F.cross_entropy(clf(train_x[idx].expand(-1, 3, -1, -1)), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        acc = classifier_accuracy(clf, test_x, test_y)
        log(f"classifier epoch {epoch + 1}/{epochs}: loss {loss.item():.3f}, test accuracy {acc:.4f}")
    return clf.eval(), acc


@torch.no_grad()
def classifier_accuracy(clf, x, y):
    clf.eval()
    right = 0
    for s in range(0, len(x), 1000):
        right += (clf(x[s:s + 1000].expand(-1, 3, -1, -1)).argmax(1) == y[s:s + 1000]).sum().item()
    return right / len(x)


@torch.no_grad()
def classify(clf, images):
    """images (N, C, 64, 64) -> (features (N, 256) numpy, max softmax (N,), argmax (N,))."""
    feats, conf, pred = [], [], []
    for s in range(0, len(images), 1000):
        x = images[s:s + 1000].float()
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        f = clf.features(x)
        p = F.softmax(clf.out(f), dim=1)
        feats.append(f.cpu().numpy())
        c, k = p.max(1)
        conf.append(c.cpu().numpy())
        pred.append(k.cpu().numpy())
    return np.concatenate(feats), np.concatenate(conf), np.concatenate(pred)


@torch.no_grad()
def generate(gen, n, device, seed, batch=1000):
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = [gen(torch.randn(min(batch, n - s), ft.LATENT_DIM, generator=g).to(device))
           for s in range(0, n, batch)]
    return torch.cat(out)


def image_report(clf, images, ref_features):
    feats, conf, pred = classify(clf, images)
    counts = np.bincount(pred, minlength=10)
    return {
        "images": int(len(images)),
        "share_max_softmax_over_0.9": round(float((conf > 0.9).mean()), 4),
        "frechet_distance_to_test": round(frechet_distance(feats, ref_features), 3),
        "predicted_class_counts": {FASHION_CLASSES[i]: int(counts[i]) for i in range(10)},
    }


def frechet_judge(args, clf, classify_fn, real_train, device):
    """judge(gen): the Frechet distance, in the features classify_fn(clf, images) gives, of 2,000 of
    gen's samples to 10,000 training images drawn once with the run's seed."""
    g = torch.Generator(device="cpu").manual_seed(args.seed + 9)
    subset = torch.randperm(len(real_train), generator=g)[:10000].to(device)
    train_feats, _, _ = classify_fn(clf, real_train[subset])
    n = min(2000, args.eval_samples)

    def judge(gen):
        feats, _, _ = classify_fn(clf, generate(gen, n, device, args.seed + 8))
        return frechet_distance(feats, train_feats)
    return judge


def make_fashion_judge(args, real_train, train_labels, device, log):
    """Trains the classifier; returns (judge, classifier, test accuracy, test images). judge(gen) is the
    Frechet distance of 2,000 of gen's samples to 10,000 training images, in classifier features: it
    picks the snapshot to export without looking at the test set."""
    test_x, test_y = load_fashion(args.data_dir, "test", device, limit=args.limit)
    clf, acc = train_classifier(real_train, train_labels, test_x, test_y, device,
                                args.classifier_epochs, args.seed + 1, log)
    return frechet_judge(args, clf, classify, real_train, device), clf, acc, (test_x, test_y)


def fashion_metrics(args, gen, real_train, clf, acc, test_set, device):
    test_x, _ = test_set
    n = args.eval_samples
    ref_feats, _, _ = classify(clf, test_x)
    report = {"classifier": {"epochs": args.classifier_epochs, "test_accuracy": round(acc, 4),
                             "input": "channel mean, 2x2 average-pooled to 32x32",
                             "features": "256-d penultimate layer (after ReLU)"}}
    report["trained_generator"] = image_report(clf, generate(gen, n, device, args.seed + 2), ref_feats)
    report["real_test_images"] = image_report(clf, test_x, ref_feats)
    report["real_test_images"]["note"] = "Frechet distance of the test set to itself is 0 by definition"
    g = torch.Generator(device="cpu").manual_seed(args.seed + 3)
    subset = torch.randperm(len(real_train), generator=g)[:min(n, len(real_train))].to(device)
    report["real_train_images"] = image_report(clf, real_train[subset], ref_feats)
    report["real_train_images"]["note"] = ("a random subset of the training set: the Frechet distance "
                                           "two real samples show")
    torch.manual_seed(args.seed + 4)
    random_gen = ft.FacegenGenerator()
    init_weights_(random_gen)
    random_gen = recalibrate_batchnorm(random_gen.to(device), device, args.seed + 5,
                                       batches=args.calib_batches, batch=args.batch)
    report["random_generator"] = image_report(clf, generate(random_gen, n, device, args.seed + 2),
                                              ref_feats)
    report["random_generator"]["note"] = (f"seeded random init of this generator (torch seed "
                                          f"{args.seed + 4}, weights N(0, 0.02)), batch-norm statistics "
                                          "measured on 25,600 random latents")
    for path in args.extra_generator or []:
        other = ft.load_network(path).to(device)
        report[f"file:{os.path.basename(path)}"] = image_report(
            clf, generate(other, n, device, args.seed + 2), ref_feats)
    return report


# ---------------------------------------------------------------------------------------- face metrics

def train_face_classifier(train_x, train_y, test_x, test_y, heads, device, epochs, seed, log):
    """Trains FaceClassifier on real faces; returns (classifier, {HEAD: held-out accuracy})."""
    torch.manual_seed(seed)
    clf = FaceClassifier({h: len(v) for h, v in heads.items()}).to(device)
    opt = torch.optim.Adam(clf.parameters(), lr=1e-3)
    n = len(train_x)
    for epoch in range(epochs):
        clf.train()
        perm = torch.randperm(n, device=device)
        for s in range(0, n, 256):
            idx = perm[s:s + 256]
            x = train_x[idx]
            logits = clf(x)
            loss = sum(F.cross_entropy(logits[h], train_y[h][idx]) for h in heads)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        acc = face_classifier_accuracy(clf, test_x, test_y)
        log(f"face classifier epoch {epoch + 1}/{epochs}: loss {loss.item():.3f}, held-out accuracy "
            + ", ".join(f"{h} {a:.3f}" for h, a in acc.items()))
    return clf.eval(), acc


@torch.no_grad()
def face_classifier_accuracy(clf, x, y):
    clf.eval()
    right = {h: 0 for h in y}
    for s in range(0, len(x), 1000):
        logits = clf.logits(clf.features(x[s:s + 1000]))
        for h in y:
            right[h] += (logits[h].argmax(1) == y[h][s:s + 1000]).sum().item()
    return {h: right[h] / len(x) for h in y}


@torch.no_grad()
def classify_faces(clf, images):
    """images (N, 3, 64, 64) -> (features (N, 256) numpy, {HEAD: max softmax (N,)}, {HEAD: argmax (N,)})."""
    feats, conf, pred = [], {h: [] for h in clf.heads}, {h: [] for h in clf.heads}
    for s in range(0, len(images), 1000):
        f = clf.features(images[s:s + 1000].float())
        feats.append(f.cpu().numpy())
        for h, logits in clf.logits(f).items():
            c, k = F.softmax(logits, dim=1).max(1)
            conf[h].append(c.cpu().numpy())
            pred[h].append(k.cpu().numpy())
    return (np.concatenate(feats), {h: np.concatenate(v) for h, v in conf.items()},
            {h: np.concatenate(v) for h, v in pred.items()})


def face_report(clf, heads, images, ref_features):
    feats, conf, pred = classify_faces(clf, images)
    confident = np.stack([conf[h] > 0.9 for h in heads])  # (heads, N)
    return {
        "images": int(len(images)),
        "share_confident_every_head": round(float(confident.all(0).mean()), 4),
        "share_max_softmax_over_0.9": {h: round(float(confident[i].mean()), 4) for i, h in enumerate(heads)},
        "frechet_distance_to_held_out": round(frechet_distance(feats, ref_features), 3),
        "predicted_value_counts": {h: {v: int(c) for v, c in zip(values, np.bincount(pred[h], minlength=len(values)))}
                                   for h, values in heads.items()},
    }


def make_face_judge(args, real_train, train_labels, heads, device, log):
    """Trains the face classifier; returns (judge, classifier, held-out accuracy, held-out images).
    judge(gen) is the Frechet distance of 2,000 of gen's samples to 10,000 training faces in classifier
    features; the held-out faces are not looked at to choose."""
    test_x, test_y, _ = load_faces(args.data_dir, device, "held_out", limit=args.limit)
    clf, acc = train_face_classifier(real_train, train_labels, test_x, test_y, heads, device,
                                     args.classifier_epochs, args.seed + 1, log)
    return frechet_judge(args, clf, classify_faces, real_train, device), clf, acc, test_x


def face_metrics(args, gen, real_train, heads, clf, acc, held_out, device):
    """The classifier's figures for the trained generator, real training and held-out faces and a
    random-weight generator of the same architecture, each on as many images as are held out."""
    n = min(args.eval_samples, len(held_out))
    ref_feats, _, _ = classify_faces(clf, held_out)
    report = {"classifier": {"epochs": args.classifier_epochs,
                             "held_out_accuracy": {h: round(a, 4) for h, a in acc.items()},
                             "input": "RGB 64x64", "features": "256-d penultimate layer (after ReLU)",
                             "confident": "max softmax > 0.9"}}
    report["trained_generator"] = face_report(clf, heads, generate(gen, n, device, args.seed + 2), ref_feats)
    report["real_held_out_faces"] = face_report(clf, heads, held_out[:n], ref_feats)
    report["real_held_out_faces"]["note"] = "the reference: Frechet distance 0 by definition"
    g = torch.Generator(device="cpu").manual_seed(args.seed + 3)
    subset = torch.randperm(len(real_train), generator=g)[:n].to(device)
    report["real_training_faces"] = face_report(clf, heads, real_train[subset], ref_feats)
    report["real_training_faces"]["note"] = ("a random subset of the training faces: the Frechet distance "
                                             "two real samples show")
    torch.manual_seed(args.seed + 4)
    random_gen = make_generator(args.arch)
    init_weights_(random_gen)
    random_gen = recalibrate_batchnorm(random_gen.to(device), device, args.seed + 5,
                                       batches=args.calib_batches, batch=args.batch)
    report["random_generator"] = face_report(clf, heads, generate(random_gen, n, device, args.seed + 2),
                                             ref_feats)
    report["random_generator"]["note"] = (f"seeded random init of this generator (torch seed "
                                          f"{args.seed + 4}, weights N(0, 0.02)), batch-norm statistics "
                                          f"measured on {args.calib_batches * args.batch} random latents")
    for path in args.extra_generator or []:
        other = load_generator(path).to(device)
        report[f"file:{os.path.basename(path)}"] = face_report(
            clf, heads, generate(other, n, device, args.seed + 2), ref_feats)
    return report


# ------------------------------------------------------------------------------------------ training

def exportable(gen, args, device, batches):
    """A float32, contiguous copy of gen in eval mode with batch-norm statistics measured afresh."""
    out = copy.deepcopy(gen).float().to(memory_format=torch.contiguous_format)
    return recalibrate_batchnorm(out, device, args.seed + 6, batches=batches, batch=args.batch)


def train(args, data, device, log, judge=None):
    """Trains; returns (generator to export, info). With a judge (generator -> score, lower is better),
    snapshots are scored every --judge-every seconds and the best one is returned, so a late collapse
    of the adversarial game cannot spoil the result."""
    torch.manual_seed(args.seed)
    gen = make_generator(args.arch)
    disc = Discriminator(args.d_norm, kernel=4 if args.arch == "tutorial" else 5)
    init_weights_(gen)
    init_weights_(disc)
    gen, disc = gen.to(device), disc.to(device)
    if device.type == "cuda":
        gen = gen.to(memory_format=torch.channels_last)
        disc = disc.to(memory_format=torch.channels_last)
        data = data.contiguous(memory_format=torch.channels_last)
    ema = copy.deepcopy(gen).eval() if args.ema > 0 else None
    extra = {"fused": True} if device.type == "cuda" else {}
    opt_g = torch.optim.Adam(gen.parameters(), lr=args.lr, betas=(0.5, 0.999), **extra)
    opt_d = torch.optim.Adam(disc.parameters(), lr=args.lr, betas=(0.5, 0.999), **extra)
    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bool(args.amp))
    bce = nn.BCEWithLogitsLoss()
    n, b = len(data), args.batch
    steps_per_epoch = n // b
    real_target = torch.full((b,), args.real_label, device=device)
    fake_target = torch.zeros(b, device=device)
    gen_params, ema_params = list(gen.parameters()), list(ema.parameters()) if ema else []

    start = time.monotonic()
    deadline = start + args.minutes * 60.0 if args.minutes else float("inf")
    step, epoch, history = 0, 0, []
    stop = False
    next_judge = start + args.judge_every if judge and args.judge_every > 0 else float("inf")
    best = {"score": float("inf")}
    judged = []

    def judge_now():
        snap = exportable(ema if ema is not None else gen, args, device, batches=20)
        score = judge(snap)
        judged.append({"step": step, "seconds": round(time.monotonic() - start, 1), "score": round(score, 3)})
        log(f"judge at step {step}: Frechet distance to training images {score:.3f}"
            + (" (best so far)" if score < best["score"] else ""))
        if score < best["score"]:
            best.update(score=score, step=step,
                        state={k: v.detach().cpu().clone() for k, v in snap.state_dict().items()})
    while not stop and epoch < args.epochs:
        perm = torch.randperm(n, device=device)
        for i in range(steps_per_epoch):
            real = data[perm[i * b:(i + 1) * b]].expand(-1, 3, -1, -1)  # (b, 3, 64, 64)
            if args.flip:
                flip = torch.rand(b, 1, 1, 1, device=device) < 0.5
                real = torch.where(flip, real.flip(3), real)
            z = torch.randn(b, ft.LATENT_DIM, device=device)
            with amp:
                fake = gen(z)
                d_real, d_fake = disc(real), disc(fake.detach())
                loss_d = bce(d_real.float(), real_target) + bce(d_fake.float(), fake_target)
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()
            with amp:
                d_gen = disc(fake)
                loss_g = bce(d_gen.float(), torch.ones_like(real_target))
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            if ema is not None:
                decay = min(args.ema, (1.0 + step) / (10.0 + step))
                with torch.no_grad():
                    for p_ema, p in zip(ema_params, gen_params):
                        p_ema.lerp_(p, 1.0 - decay)
            step += 1
            if step % args.log_every == 0 or step == 1:
                rec = {"step": step, "epoch": epoch + (i + 1) / steps_per_epoch,
                       "seconds": round(time.monotonic() - start, 1),
                       "loss_d": round(loss_d.item(), 4), "loss_g": round(loss_g.item(), 4),
                       "d_real": round(torch.sigmoid(d_real.float()).mean().item(), 3),
                       "d_fake": round(torch.sigmoid(d_fake.float()).mean().item(), 3)}
                history.append(rec)
                log(" ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                             for k, v in rec.items()))
            if time.monotonic() > next_judge:
                judge_now()
                next_judge = time.monotonic() + args.judge_every
            if step >= args.max_steps or time.monotonic() > deadline:
                stop = True
                break
        epoch += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - start
    log(f"trained {step} steps ({step / steps_per_epoch:.2f} epochs of {n} images) in {seconds:.1f} s, "
        f"{step / seconds:.1f} steps/s")
    info = {"steps": step, "epochs": round(step / steps_per_epoch, 3), "train_seconds": round(seconds, 1),
            "steps_per_second": round(step / seconds, 2), "history": history}
    final = ema if ema is not None else gen
    if judge:
        judge_now()
        final = copy.deepcopy(final).float().to(memory_format=torch.contiguous_format)
        final.load_state_dict(best["state"])
        info["judged"] = judged
        info["exported_step"] = best["step"]
        log(f"exporting the snapshot of step {best['step']} (Frechet distance {best['score']:.3f})")
    else:
        info["exported_step"] = step
    return exportable(final, args, device, batches=args.calib_batches), info


# ---------------------------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", choices=["fashion", "emoji", "faces"], required=True)
    p.add_argument("--data-dir", required=True,
                   help="folder of the idx .gz files, of the emoji PNGs or of make_faces.py's set")
    p.add_argument("--arch", choices=["facegen", "tutorial"], default="facegen",
                   help="generator: facegen's SHPC layout (network.bin) or the PyTorch DCGAN tutorial's (netG.pth)")
    p.add_argument("--out", required=True, help="folder for network.bin or netG.pth, PNGs and metrics.json")
    p.add_argument("--epochs", type=int, default=1000000, help="stop after this many epochs")
    p.add_argument("--minutes", type=float, default=None, help="stop after this much training time")
    p.add_argument("--max-steps", type=int, default=1 << 62, help="stop after this many steps (tests)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--real-label", type=float, default=0.9,
                   help="target for real images; below 1: one-sided label smoothing")
    p.add_argument("--d-norm", choices=["bn", "sn"], default="bn",
                   help="discriminator normalisation: batch norm or spectral norm")
    p.add_argument("--judge-every", type=float, default=30.0,
                   help="fashion, faces: seconds between scored snapshots, the best is exported; 0: export the last")
    p.add_argument("--ema", type=float, default=0.999, help="EMA decay of the exported generator; 0: off")
    p.add_argument("--flip", type=int, default=None, help="random horizontal flips (default: emoji only)")
    p.add_argument("--amp", type=int, default=0, help="1: bf16 autocast on CUDA (default: fp32, TF32 on)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--limit", type=int, default=None, help="use only the first N images (tests)")
    p.add_argument("--classifier-epochs", type=int, default=5)
    p.add_argument("--eval-samples", type=int, default=10000)
    p.add_argument("--eval-only", action="store_true", help="skip training, evaluate --generator")
    p.add_argument("--generator", help="network.bin or netG.pth to evaluate with --eval-only")
    p.add_argument("--extra-generator", action="append",
                   help="another network.bin or netG.pth to report on too (fashion, faces)")
    p.add_argument("--calib-batches", type=int, default=200,
                   help="batches of --batch random latents that measure batch-norm statistics")
    p.add_argument("--log-every", type=int, default=500)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    if args.eval_only and not args.generator:
        p.error("--eval-only needs --generator")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(args.device)
    if args.flip is None:
        args.flip = int(args.data == "emoji")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    log(f"torch {torch.__version__} on {device} ({dev_name}); args {vars(args)}")

    if args.data == "fashion":
        data, labels = load_fashion(args.data_dir, "train", device, limit=args.limit)
        background = "black (Fashion-MNIST's own)"
    elif args.data == "faces":
        data, labels, heads = load_faces(args.data_dir, device, "train", limit=args.limit)
        background = f"{make_faces.BACKGROUND} (DiceBear avataaars' default)"
    else:
        data, labels = load_emoji(args.data_dir, device, limit=args.limit), None
        background = "white (RGBA composited over white)"
    log(f"data: {args.data}, {tuple(data.shape)}, range [{data.min().item():.2f}, {data.max().item():.2f}]")

    metrics = {"data": args.data, "images": int(len(data)), "background": background,
               "device": dev_name, "torch": torch.__version__,
               "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
               "architecture": args.arch, "latents": "z ~ N(0, I), 100-d",
               "recipe": {"batch": args.batch, "lr": args.lr, "betas": [0.5, 0.999],
                          "loss": "BCE with logits, non-saturating G loss", "real_label": args.real_label,
                          "discriminator_norm": args.d_norm,
                          "ema": args.ema, "flip": bool(args.flip),
                          "amp": "bf16 autocast" if args.amp else "fp32", "seed": args.seed}}
    judge = None
    if args.data == "fashion":
        judge, clf, acc, test_set = make_fashion_judge(args, data, labels, device, log)
    elif args.data == "faces":
        judge, clf, acc, test_set = make_face_judge(args, data, labels, heads, device, log)
    if args.eval_only:
        gen = load_generator(args.generator).to(device)
        metrics["generator"] = os.path.abspath(args.generator)
    else:
        gen, info = train(args, data, device, log, judge)
        metrics["training"] = info
        path = save_generator(gen, args.arch, args.out)
        # evaluate what was written, not what is in memory
        gen = load_generator(path).to(device)
        log(f"wrote {path}")
    write_images(gen, args.out, device, args.seed + 7)
    log("wrote samples.png, interpolation.png (spherical interpolation)")
    if args.data == "fashion":
        metrics["fashion_metrics"] = fashion_metrics(args, gen, data, clf, acc, test_set, device)
        for k, v in metrics["fashion_metrics"].items():
            if isinstance(v, dict) and "share_max_softmax_over_0.9" in v:
                log(f"{k}: share max softmax > 0.9 {v['share_max_softmax_over_0.9']:.4f}, "
                    f"Frechet distance {v['frechet_distance_to_test']:.3f}")
    elif args.data == "faces":
        metrics["face_metrics"] = face_metrics(args, gen, data, heads, clf, acc, test_set, device)
        for k, v in metrics["face_metrics"].items():
            if isinstance(v, dict) and "share_confident_every_head" in v:
                log(f"{k}: confident on every head {v['share_confident_every_head']:.4f}, Frechet distance "
                    f"{v['frechet_distance_to_held_out']:.3f}; per head {v['share_max_softmax_over_0.9']}")
    with open(os.path.join(args.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    log(f"wrote metrics.json; total {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
