"""make_faces.py: builds the cartoon-face training set from DiceBear's avataaars style, deterministically.

    python3 train/make_faces.py --modules DIR [--count 32768] [--seed 1] [--out .deps/data/faces]
    python3 train/make_faces.py --check --out .deps/data/faces      (reads the set back, prints a summary)

render_faces.mjs (node) writes each face as SVG with its labels; this script rasterises them with
rsvg-convert (Debian's librsvg2-bin) to 64x64 RGB over DiceBear's default blue background and packs:

  OUT/faces-images.u8.xz   (N, 64, 64, 3) uint8, H, W, C with C fastest, xz-compressed (about 0.8 KB a face)
  OUT/faces-labels.json    {"count", "seed", "held_out_from", "heads": {HEAD: [value, ...]},
                            "labels": {HEAD: [value index per face]}, "images_sha256", ...}

Faces [held_out_from, N) are held out: the classifier of the quality figures is checked on them and the
Frechet distances are measured against them; training uses the others.

rsvg-convert renders 16 faces at a time, as a 4x4 sheet of nested <svg> elements (one process per face
costs more than the drawing): each face's ids are prefixed with its index so that masks of different
faces cannot collide, and a face drawn on a sheet differs from the same face drawn alone by at most one
level of 255 (rounding of the antialiasing). The same inputs, node packages and rsvg-convert give the
same bytes.
"""

import argparse
import concurrent.futures
import hashlib
import io
import json
import lzma
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 64
SHEET_COLS = 4          # faces per sheet side: 16 faces per rsvg-convert call
BACKGROUND = "#65c9ff"  # DiceBear avataaars' default background colour
BLOCK = 1024            # faces rendered, rasterised and compressed per step
IMAGES = "faces-images.u8.xz"
LABELS = "faces-labels.json"
ID_REF = re.compile(r'(id="|url\(#)([A-Za-z0-9_-]+)')


def sheet_svg(faces):
    """One SVG drawing `faces` (dicts with index and svg) row-major on a SHEET_COLS-wide grid of 64 px tiles."""
    rows = (len(faces) + SHEET_COLS - 1) // SHEET_COLS
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{SHEET_COLS * SIZE}" height="{rows * SIZE}">'
             f'<rect width="100%" height="100%" fill="{BACKGROUND}"/>']
    for k, face in enumerate(faces):
        r, c = divmod(k, SHEET_COLS)
        svg = ID_REF.sub(lambda m, i=face["index"]: f"{m.group(1)}f{i}-{m.group(2)}", face["svg"])
        if not svg.startswith("<svg "):
            raise ValueError(f"face {face['index']}: the SVG does not start with <svg")
        parts.append(svg.replace("<svg ", f'<svg x="{c * SIZE}" y="{r * SIZE}" width="{SIZE}" height="{SIZE}" ', 1))
    parts.append("</svg>")
    return "".join(parts).encode()


def rasterise(faces):
    """faces -> (len(faces), 64, 64, 3) uint8 through one rsvg-convert call."""
    from PIL import Image
    done = subprocess.run(["rsvg-convert", "--format", "png"], input=sheet_svg(faces), capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"rsvg-convert failed on faces {faces[0]['index']}..{faces[-1]['index']}: "
                           f"{done.stderr.decode(errors='replace').strip()}")
    with Image.open(io.BytesIO(done.stdout)) as im:
        sheet = np.asarray(im.convert("RGB"))
    tiles = [sheet[r * SIZE:(r + 1) * SIZE, c * SIZE:(c + 1) * SIZE]
             for r, c in (divmod(k, SHEET_COLS) for k in range(len(faces)))]
    return np.stack(tiles)


def render_block(args, start, count, pool):
    """Faces [start, start + count): (images (count, 64, 64, 3) uint8, labels: list of dicts)."""
    cmd = ["node", os.path.join(HERE, "render_faces.mjs"), "--modules", args.modules,
           "--count", str(count), "--seed", str(args.seed), "--start", str(start)]
    done = subprocess.run(cmd, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode(errors="replace").strip() or f"{' '.join(cmd)} failed")
    lines = done.stdout.splitlines()
    heads = json.loads(lines[0])["heads"]
    faces = [json.loads(line) for line in lines[1:]]
    if [f["index"] for f in faces] != list(range(start, start + count)):
        raise RuntimeError(f"render_faces.mjs returned the wrong faces for [{start}, {start + count})")
    per_sheet = SHEET_COLS * SHEET_COLS
    sheets = pool.map(rasterise, [faces[s:s + per_sheet] for s in range(0, count, per_sheet)])
    return np.concatenate(list(sheets)), [f["labels"] for f in faces], heads


def encode_labels(heads, label_dicts):
    """{HEAD: values}, list of {HEAD: value} -> {HEAD: [index of the value per face]}."""
    index = {h: {v: i for i, v in enumerate(values)} for h, values in heads.items()}
    return {h: [index[h][d[h]] for d in label_dicts] for h in heads}


def build(args):
    if not os.path.isdir(os.path.join(args.modules, "node_modules", "@dicebear")):
        sys.exit(f"make_faces.py: {args.modules} has no node_modules/@dicebear: install "
                 "@dicebear/core and @dicebear/collection there first (make faces-data does)")
    os.makedirs(args.out, exist_ok=True)
    label_dicts, compressed = [], []
    digest = hashlib.sha256()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for start in range(0, args.count, BLOCK):
            images, labels, heads = render_block(args, start, min(BLOCK, args.count - start), pool)
            raw = np.ascontiguousarray(images).tobytes()
            digest.update(raw)
            compressed.append(pool.submit(lzma.compress, raw, preset=6))
            label_dicts += labels
            print(f"make_faces.py: rendered {start + len(labels)}/{args.count} faces", flush=True)
        blocks = [f.result() for f in compressed]
    labels = encode_labels(heads, label_dicts)
    tmp = os.path.join(args.out, IMAGES + ".tmp")
    with open(tmp, "wb") as f:
        for block in blocks:  # concatenated xz streams read back as one
            f.write(block)
    os.replace(tmp, os.path.join(args.out, IMAGES))
    meta = {"count": args.count, "seed": args.seed, "size": [SIZE, SIZE, 3], "layout": "N, H, W, C uint8",
            "style": "avataaars (DiceBear)", "background": BACKGROUND,
            "held_out_from": args.count - args.held_out, "images_sha256": digest.hexdigest(),
            "heads": heads, "labels": labels}
    with open(os.path.join(args.out, LABELS + ".tmp"), "w") as f:
        json.dump(meta, f, separators=(",", ":"))
    os.replace(os.path.join(args.out, LABELS + ".tmp"), os.path.join(args.out, LABELS))
    size = os.path.getsize(os.path.join(args.out, IMAGES))
    print(f"make_faces.py: {args.count} faces, {size / 1e6:.1f} MB in {args.out}/{IMAGES}, "
          f"sha256 of the pixels {digest.hexdigest()[:16]}")


def load_faces(folder):
    """(images (N, 64, 64, 3) uint8, meta dict as in faces-labels.json); checks counts and the digest."""
    with open(os.path.join(folder, LABELS)) as f:
        meta = json.load(f)
    with open(os.path.join(folder, IMAGES), "rb") as f:
        raw = lzma.decompress(f.read())
    n = meta["count"]
    if len(raw) != n * SIZE * SIZE * 3:
        raise ValueError(f"{folder}/{IMAGES}: {len(raw)} bytes, expected {n} faces of {SIZE * SIZE * 3}")
    if hashlib.sha256(raw).hexdigest() != meta["images_sha256"]:
        raise ValueError(f"{folder}/{IMAGES}: the pixels do not match the digest in {LABELS}")
    for head, values in meta["labels"].items():
        if len(values) != n or min(values) < 0 or max(values) >= len(meta["heads"][head]):
            raise ValueError(f"{folder}/{LABELS}: labels of {head} do not fit {n} faces or its values")
    return np.frombuffer(raw, np.uint8).reshape(n, SIZE, SIZE, 3), meta


def check(args):
    images, meta = load_faces(args.out)
    print(f"{len(images)} faces {images.shape}, held out from {meta['held_out_from']}, mean pixel "
          f"{images.mean():.2f}")
    for head, values in meta["heads"].items():
        counts = np.bincount(meta["labels"][head], minlength=len(values))
        print(f"  {head}: {len(values)} values, faces per value {counts.min()}..{counts.max()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--modules", help="folder holding node_modules/@dicebear/{core,collection}")
    p.add_argument("--count", type=int, default=32768)
    p.add_argument("--held-out", type=int, default=4096, help="the last this many faces are held out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="rsvg-convert and xz processes at a time")
    p.add_argument("--out", default=".deps/data/faces")
    p.add_argument("--check", action="store_true", help="read OUT back and summarise it")
    args = p.parse_args()
    if args.check:
        return check(args)
    if not args.modules:
        p.error("--modules is required to build the set")
    if args.count < 1 or not 0 < args.held_out < args.count:
        p.error("--count must be positive and --held-out between 1 and --count - 1")
    build(args)


if __name__ == "__main__":
    main()
