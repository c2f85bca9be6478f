#!/usr/bin/env bash
# model_sizes.sh: generators of 32x32 and 128x128 images (3 and 5 stride-2 transposed convolutions,
# common/model_spec.hpp) through every driver, on the CPU backend, with models from make-random-network.
#
#   formats   txt, bmp, npy, npy-u8, png, mosaic-png and tar of each size read back (NumPy, Pillow,
#             tarfile): every array (N, S, S, C), each 8-bit image channel_to_byte of the npy's values,
#             the BMP and PNG mosaics and each PNG tiled from them, the txt lines S * S * nc values
#   MPI       2 ranks write every format byte-identical to one process (skipped without mpirun)
#   --resume  a finished sharded job run again with --resume keeps every shard; the same prefix with
#             a model of another size is another job, refused in one sentence
#   serve     POST /v1/generate (npy, npy-u8, mosaic) and GET /v1/images/SEED.png hold the batch tool's
#             bytes for the same seeds; the Open Inference Protocol's metadata and answers (JSON, and
#             binary: the pixels as the batch tool's npy-u8) have the model's (S, S, 3)
# Every run has a deadline and starts with default signal dispositions. Usage: model_sizes.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh model_sizes
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
maker=$build/make-random-network
[ -x "$prog" ] && [ -x "$maker" ] || { echo "model_sizes: $prog or $maker is missing (run make)"; exit 1; }
py=/usr/bin/python3  # Debian's, with numpy and Pillow
$py -c "import numpy, PIL" 2> /dev/null || py=python3
$py -c "import numpy, PIL" 2> /dev/null || skip_suite "$py lacks numpy or Pillow"
work=$(mktemp -d /tmp/facegen-sizes.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill -KILL "$pid" 2> /dev/null && wait "$pid" 2> /dev/null; done
  rm -rf "$work"
}
on_exit cleanup
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
formats=txt,bmp,npy,npy-u8,png,mosaic-png,tar

# run ARGS...: the program on the CPU, 120 s at most; stdout and stderr kept.
run() { deadline 120 "$prog" --device cpu "$@" > "$work/stdout" 2> "$work/stderr"; }

echo "generators of 32x32 and 128x128 images, every driver:"
# 32x32: grey, 5x5 kernels with biases, odd nz; 128x128: RGB, the tutorial's 4x4 kernels.
"$maker" --seed 4 --output "$work/m32.safetensors" --image-size 32 --nz 37 --ngf 48 --nc 1 --kernel-size 5 --bias=true > /dev/null &&
"$maker" --seed 5 --output "$work/m128.safetensors" --image-size 128 --nz 100 --ngf 16 --nc 3 > /dev/null ||
  { echo "model_sizes: make-random-network failed"; exit 1; }

for size in 32 128; do
  model=$work/m$size.safetensors
  n=11  # a 4 x 3 mosaic with an empty tile, tar shards of 4
  if ! run --model "$model" --seeds 3-13 --output "$work/f$size" --formats $formats --shard-images 4 \
       --grid-padding 2 --grid-columns 4 -q; then
    fail "$size x $size: every format" "$(head -c 300 "$work/stderr")"
    continue
  fi
  verdict=$($py - "$work" "$size" $n <<'PY' 2>&1
import glob, io, json, sys, tarfile
import numpy as np
from PIL import Image
work, s, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = f"{work}/f{s}"
f = np.concatenate([np.load(x) for x in sorted(glob.glob(p + "-0*.npy")) if not x.endswith(".u8.npy")])
u8 = np.concatenate([np.load(x) for x in sorted(glob.glob(p + "-0*.u8.npy"))])
nc = f.shape[3]
problems = []
if f.shape != (n, s, s, nc) or f.dtype != np.float32: problems.append(f"npy {f.dtype} {f.shape}")
want = np.clip(((f + 1) / 2 * 255).astype(np.float32), 0, 255).astype(np.uint8)
want = np.repeat(want, 3, axis=3) if nc == 1 else want
if u8.shape != (n, s, s, 3) or not (u8 == want).all(): problems.append(f"npy-u8 {u8.shape} is not channel_to_byte of the npy")
lines = open(p + ".txt").read().split("\n")
values = np.array([[float(v) for v in line.split()] for line in lines[1:n + 1]])
if lines[0] != str(n) or values.shape != (n, s * s * nc) or np.abs(values - f.reshape(n, -1)).max() > 5.1e-5:
    problems.append(f"txt: {lines[0]} lines of {values.shape}")
pad, cols = 2, 4
for name in (p + ".bmp", p + ".png"):
    m = np.asarray(Image.open(name).convert("RGB"))
    if m.shape != (3 * s + 4 * pad, 4 * s + 5 * pad, 3): problems.append(f"{name}: {m.shape}"); continue
    for k in range(n):
        y, x = pad + (k // cols) * (s + pad), pad + (k % cols) * (s + pad)
        if not (m[y:y + s, x:x + s] == u8[k]).all(): problems.append(f"{name}: tile {k}"); break
for k in range(n):
    png = np.asarray(Image.open(f"{p}/seed{3 + k:04d}.png").convert("RGB"))  # named by seed
    if not (png == u8[k]).all(): problems.append(f"png {k}"); break
seen = 0
for shard in sorted(glob.glob(p + "-0*.tar")):
    with tarfile.open(shard) as t:
        for m in t.getmembers():
            data = t.extractfile(m).read()
            k = int(m.name.split(".")[0].removeprefix("seed")) - 3  # keys named by seed: seed0003, ...
            if m.name.endswith(".png"):
                seen += 1
                if not (np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) == u8[k]).all(): problems.append(f"tar {k}")
            elif json.loads(data)["seed"] != 3 + k: problems.append(f"tar json {m.name}")
if seen != n: problems.append(f"tar holds {seen} images")
print("ok" if not problems else "; ".join(problems[:4]))
PY
)
  if [ "$verdict" = ok ]; then
    pass "$size x $size: txt, bmp, npy, npy-u8, png, mosaic-png and tar read back as (N, $size, $size, C), one set of pixels"
  else
    fail "$size x $size: every format" "$verdict"
  fi

  # MPI: 2 ranks, every format, byte-identical to the single process.
  if command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi; then
    if deadline 120 ./run_parallel.sh --program "$prog" --model "$model" --seeds 3-13 --output "$work/r$size" \
         --ranks-per-node 2 -- --device cpu --all-ranks --formats $formats --shard-images 4 --grid-padding 2 --grid-columns 4 -q \
         > "$work/stdout" 2> "$work/stderr"; then
      differ=$(cd "$work" && for f in f$size*; do [ -d "$f" ] && continue; cmp -s "$f" "r${f#f}" || echo "$f"; done
               diff -rq "f$size" "r$size" > /dev/null || echo "f$size/")
      if [ -z "$differ" ]; then
        pass "$size x $size: 2 MPI ranks write every format byte-identical to one process"
      else
        fail "$size x $size: 2 MPI ranks" "differ: $differ"
      fi
    else
      fail "$size x $size: 2 MPI ranks" "$(tail -c 300 "$work/stderr")"
    fi
  else
    skip "$size x $size: MPI ranks (mpirun or an MPI build is missing)"
  fi
done

# --resume: a finished job is kept whole; a model of another size makes another job.
mkdir -p "$work/res"
if run --model "$work/m32.safetensors" --seeds 1-9 --output "$work/res/r" --formats tar --shard-images 3 --resume -q &&
   run --model "$work/m32.safetensors" --seeds 1-9 --output "$work/res/r" --formats tar --shard-images 3 --resume &&
   grep -q "^resumed   kept 3 files that an earlier run finished, made 0" "$work/stdout"; then
  pass "--resume with a 32x32 model: a finished job's 3 shards are kept"
else
  fail "--resume with a 32x32 model" "$(grep '^resumed' "$work/stdout") $(head -c 300 "$work/stderr")"
fi
"$maker" --seed 4 --output "$work/m64.safetensors" --nz 37 --ngf 48 --nc 1 --kernel-size 5 --bias=true > /dev/null
run --model "$work/m64.safetensors" --seeds 1-9 --output "$work/res/r" --formats tar --shard-images 3 --resume -q
status=$?
if [ $status = 1 ] && [ "$(wc -l < "$work/stderr")" = 1 ] && grep -q "image-size" "$work/stderr"; then
  pass "--resume with a 64x64 model over a 32x32 job: exit 1, one sentence naming the image size"
else
  fail "--resume over another size" "status $status: $(head -c 400 "$work/stderr")"
fi

# The service: the batch tool's bytes, and the Open Inference Protocol's shapes.
(exec env --default-signal "$prog" serve --device cpu --model "$work/m128.safetensors" --port 0 2> "$work/serve.err") &
server=$!
servers+=("$server")
if port=$(serve_port "$work/serve.err" "$server" 30); then
  post() { curl -s --max-time 60 -o "$work/$1" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$3"; }
  npy=$(post answer.npy '{"seeds": [5, 6, 7], "format": "npy"}' "http://127.0.0.1:$port/v1/generate")
  mosaic=$(post answer.png '{"seeds": [5, 6, 7], "format": "mosaic", "columns": 2}' "http://127.0.0.1:$port/v1/generate")
  u8=$(post answer.u8.npy '{"seeds": [5, 6, 7], "format": "npy-u8"}' "http://127.0.0.1:$port/v1/generate")
  one=$(curl -s --max-time 60 -o "$work/answer-5.png" -w '%{http_code}' "http://127.0.0.1:$port/v1/images/5.png")
  run --model "$work/m128.safetensors" --seeds 5-7 --output "$work/batch" --formats npy,npy-u8,png,mosaic-png --grid-columns 2 -q
  meta=$(curl -s --max-time 30 "http://127.0.0.1:$port/v2/models/facegen")
  infer=$(post infer.json '{"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [5]}]}' \
          "http://127.0.0.1:$port/v2/models/facegen/infer")
  binary=$(curl -s --max-time 60 -D "$work/binary.head" -o "$work/binary.body" -w '%{http_code}' -H 'Content-Type: application/json' \
           -d '{"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [3], "data": [5, 6, 7]}], "parameters": {"binary_data_output": true}}' \
           "http://127.0.0.1:$port/v2/models/facegen/infer")
  length=$(grep -i '^Inference-Header-Content-Length:' "$work/binary.head" | tr -dc '0-9')
  if [ "$npy $mosaic $u8 $one $infer $binary" = "200 200 200 200 200 200" ] && cmp -s "$work/answer.npy" "$work/batch.npy" &&
     cmp -s "$work/answer.png" "$work/batch.png" && cmp -s "$work/answer.u8.npy" "$work/batch.u8.npy" &&
     cmp -s "$work/answer-5.png" "$work/batch/seed0005.png" && grep -q '"shape": \[-1, 128, 128, 3\]' <<< "$meta" &&
     grep -q '"shape": \[1, 128, 128, 3\]' "$work/infer.json" && [ -n "$length" ] &&
     head -c "$length" "$work/binary.body" | grep -q '"shape": \[3, 128, 128, 3\]' &&
     cmp -s <(tail -c +$((length + 1)) "$work/binary.body") <(tail -c $((3 * 128 * 128 * 3)) "$work/batch.u8.npy"); then
    pass "serve with a 128x128 model: npy, npy-u8, mosaic and one PNG are the batch tool's bytes; OIP says (128, 128, 3)"
  else
    fail "serve with a 128x128 model" "status $npy $mosaic $u8 $one $infer $binary; metadata $(head -c 200 <<< "$meta")"
  fi
  kill -TERM "$server"
else
  fail "serve with a 128x128 model starts" "$(head -c 300 "$work/serve.err")"
fi

suite_end
