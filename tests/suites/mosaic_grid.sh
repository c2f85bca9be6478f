#!/usr/bin/env bash
# mosaic_grid.sh: --grid-columns C and --grid-padding P lay out the mosaics (bmp, mosaic-png) exactly as
# torchvision.utils.make_grid(images, nrow=C, padding=P, pad_value=0) does (torchvision itself where it
# is installed, else its documented rule written out in the check), file by file of a split
# (--mosaic-tiles), and without them the layout is today's square of ceil(sqrt(N)) tiles a side.
#
# For each case the program writes npy, bmp and mosaic-png of the same synthetic images; the test turns
# the npy floats into bytes by the formats' rule (trunc((v + 1) / 2 * 255), clamped), builds the grid
# with make_grid, and compares it with the decoded BMP (read by hand: header, padded
# bottom-up BGR rows) and PNG (Pillow), pixel for pixel. Then every bad grid value: one sentence naming
# the flag, exit 1. Usage: mosaic_grid.sh [build-dir]; exit 0 pass, 77 skipped (says why), 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh mosaic_grid
build=${1:-build}
prog=$build/facegen
[ -x "$prog" ] || { echo "mosaic_grid: $prog is missing (run make)"; exit 1; }
work=$(mktemp -d /tmp/facegen-grid.XXXXXX)
on_exit 'rm -rf "$work"'

# --- bad values: one sentence naming the flag, exit 1 ----------------------------------------------
bad() {  # bad NAME PATTERN FLAGS...
  local name=$1 pattern=$2
  shift 2
  local err status random=(--random 4)
  [[ " $* " == *" --random "* ]] && random=()
  err=$(deadline 60 "$prog" --device synthetic "${random[@]}" --output "$work/bad" "$@" 2>&1 > /dev/null)
  status=$?
  if [ $status -ne 1 ]; then
    fail "$name" "exit status $status, expected 1: $err"
  elif [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || ! printf '%s' "$err" | grep -qE -- "$pattern"; then
    fail "$name" "expected one line matching '$pattern', got: $err"
  elif ls "$work" | grep -q '^bad'; then
    fail "$name" "files were left: $(ls "$work")"
  else
    pass "$name: $err"
  fi
}
bad "--grid-columns 0" "--grid-columns must be between 1 and" --grid-columns 0
bad "--grid-columns -3" "--grid-columns must be between 1 and" --grid-columns -3
bad "--grid-columns abc" "--grid-columns expects a whole number, got 'abc'" --grid-columns abc
bad "--grid-columns 2.5" "--grid-columns expects a whole number" --grid-columns 2.5
bad "--grid-columns huge" "--grid-columns expects a whole number" --grid-columns 99999999999999999999
bad "--grid-padding -1" "--grid-padding must be between 0 and 1024" --grid-padding -1
bad "--grid-padding 1025" "--grid-padding must be between 0 and 1024" --grid-padding 1025
bad "--grid-padding x" "--grid-padding expects a whole number, got 'x'" --grid-padding x
bad "--grid-columns without a mosaic" "--grid-columns lays out the mosaic formats" --formats txt,npy --grid-columns 4
bad "--grid-padding without a mosaic" "--grid-padding lays out the mosaic formats" --formats png --grid-padding 2
bad "a grid over 2 GiB" "cannot write .*bad.bmp: a mosaic of 16,384 images is .* more than the BMP writer can hold" \
  --formats bmp --random 16384 --grid-columns 16384 --grid-padding 1024

# --- the layout against torchvision's make_grid --------------------------------------------------------
if ! /usr/bin/python3 -c "import torch, numpy, PIL" 2> /dev/null; then
  echo "mosaic_grid: layout check skipped: /usr/bin/python3 lacks torch, numpy or Pillow" \
       "(make test-deps installs python3-torch, python3-pil)"
  echo "$passed passed, $failed failed"
  [ $failed -eq 0 ] && exit 77 || exit 1
fi
# N C P T: images, --grid-columns (- for none), --grid-padding, --mosaic-tiles
cases="7 - 0 128
5 - 0 128
10 4 2 128
3 8 0 128
5 2 1 128
1 1 5 128
13 5 3 3
11 - 2 2
9 3 2 2"
runs=()
while read -r n c p t; do
  # Each case at another PNG level (0 stored ... 12), since PIL must read every level the same.
  flags=(--grid-padding "$p" --mosaic-tiles "$t" --png-level $(( (n + p) % 13 )))
  [ "$c" != - ] && flags+=(--grid-columns "$c")
  out="$work/g$n-$c-$p-$t"
  if deadline 60 "$prog" --device synthetic --random "$n" --seed "$n" --formats npy,bmp,mosaic-png --output "$out" \
       "${flags[@]}" --quiet 2> "$work/err"; then
    runs+=("$out $n $c $p $t")
  else
    fail "N=$n ${flags[*]}" "the run failed: $(head -c 300 "$work/err")"
  fi
done <<< "$cases"
# One interpreter for every case (importing torch takes seconds): a line "ok|FAIL case: why" each.
while IFS='|' read -r verdict text; do
  if [ "$verdict" = ok ]; then pass "$text"; else fail "${text%%: *}" "${text#*: }"; fi
done < <(/usr/bin/python3 - "${runs[@]}" 2>&1 <<'PY'
import math, os, struct, sys
import numpy as np, torch
from PIL import Image

# torchvision's own make_grid where it is installed (Debian's python3-torchvision; CI leaves it out for
# its many codec libraries), else its documented rule written out here: xmaps = min(nrow, B) columns,
# ymaps = ceil(B / xmaps) rows, a canvas of (64 + padding) * maps + padding pixels a side filled with
# pad_value, image k at row k // xmaps, column k % xmaps, offset by padding; one image is returned as it is.
def make_grid_rule(tensor, nrow, padding, pad_value):
    if tensor.size(0) == 1:
        return tensor[0]
    count, channels, height, width = tensor.shape
    xmaps = min(nrow, count)
    ymaps = int(math.ceil(count / xmaps))
    h, w = height + padding, width + padding
    grid = tensor.new_full((channels, h * ymaps + padding, w * xmaps + padding), pad_value)
    for k in range(count):
        y, x = divmod(k, xmaps)
        grid[:, y * h + padding : y * h + padding + height, x * w + padding : x * w + padding + width] = tensor[k]
    return grid

make_grid, reference = make_grid_rule, "make_grid's documented rule"
if os.environ.get("FACEGEN_GRID_REFERENCE") != "rule":
    try:
        import torchvision
        make_grid, reference = torchvision.utils.make_grid, "torchvision's make_grid"
    except ImportError:
        pass

def read_bmp(path):
    data = open(path, "rb").read()
    assert data[:2] == b"BM", path
    size, offset = struct.unpack_from("<I", data, 2)[0], struct.unpack_from("<I", data, 10)[0]
    width, height = struct.unpack_from("<ii", data, 18)
    bits = struct.unpack_from("<H", data, 28)[0]
    assert size == len(data) and offset == 54 and bits == 24 and height > 0, (path, size, len(data), offset, bits)
    stride = (width * 3 + 3) // 4 * 4
    assert len(data) == 54 + stride * height, path
    rows = np.frombuffer(data, np.uint8, offset=54).reshape(height, stride)
    assert not rows[:, width * 3:].any(), f"{path}: row padding bytes are not zero"
    return rows[::-1, : width * 3].reshape(height, width, 3)[:, :, ::-1]  # top-down RGB

def check(prefix, n, c, p, t):
    images = np.load(prefix + ".npy")  # (N, 64, 64, 3) float32
    assert images.shape == (n, 64, 64, 3), images.shape
    scaled = (images + np.float32(1)) / np.float32(2) * np.float32(255)
    as_bytes = np.clip(scaled, 0, 255).astype(np.uint8)  # truncation toward zero
    per_file = t * t
    files = 1 if n <= per_file else -(-n // per_file)
    for k in range(files):
        name = prefix if files == 1 else f"{prefix}-{k + 1:04d}"
        first, count = k * per_file, min(per_file, n - k * per_file)
        tiles = torch.from_numpy(as_bytes[first : first + count]).permute(0, 3, 1, 2)  # (count, 3, 64, 64)
        nrow = math.isqrt(count - 1) + 1 if c == "-" else int(c)
        expected = make_grid(tiles, nrow=nrow, padding=p, pad_value=0).permute(1, 2, 0).numpy()
        if c == "-" and count > 1:  # the square: make_grid's rows, then black rows to nrow of them
            side = nrow * (64 + p) + p
            square = np.zeros((side, side, 3), np.uint8)
            square[: expected.shape[0], : expected.shape[1]] = expected
            expected = square
        decoded = ((read_bmp(name + ".bmp"), "bmp"), (np.asarray(Image.open(name + ".png").convert("RGB")), "png"))
        for got, what in decoded:
            if got.shape != expected.shape:
                return (f"{name}.{what}: {got.shape[1]} x {got.shape[0]} pixels, make_grid gives "
                        f"{expected.shape[1]} x {expected.shape[0]}")
            wrong = np.argwhere(got != expected)
            if len(wrong):
                y, x, ch = wrong[0]
                return (f"{name}.{what}: {len(wrong)} values differ from make_grid, first at row {y}, column {x}, "
                        f"channel {ch}: {got[y, x, ch]} instead of {expected[y, x, ch]}")
    return None, files

for run in sys.argv[1:]:
    prefix, n, c, p, t = run.split()
    name = f"N={n} --grid-columns {c} --grid-padding {p} --mosaic-tiles {t}"
    try:
        result = check(prefix, int(n), c, int(p), int(t))
    except Exception as e:  # a malformed file: the case fails, the others still run
        result = f"{type(e).__name__}: {e}"
    if isinstance(result, tuple):
        print(f"ok|{name}: {result[1]} file(s) equal {reference} pixel for pixel, bmp and png")
    else:
        print(f"FAIL|{name}: {result}")
PY
)
[ ${#runs[@]} -gt 0 ] && [ $((passed + failed)) -ge $(( $(wc -l <<< "$cases") + 11 )) ] ||
  fail "layout check" "fewer verdicts than cases (the check itself failed)"

# The default layout stays byte for byte what it was: no grid flag and an explicit --grid-padding 0 agree.
deadline 60 "$prog" --device synthetic --random 10 --formats bmp --output "$work/plain" --quiet
deadline 60 "$prog" --device synthetic --random 10 --formats bmp --output "$work/zero" --grid-padding 0 --quiet
if cmp -s "$work/plain.bmp" "$work/zero.bmp" && [ "$(stat -c %s "$work/plain.bmp")" -eq $((54 + 256 * 256 * 3)) ]; then
  pass "no grid flags: the square mosaic of 4 x 4 tiles, as before"
else
  fail "no grid flags" "the default mosaic changed"
fi

suite_end --bare
