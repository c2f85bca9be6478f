#!/usr/bin/env bash
# encoded_runs.sh: outputs whose bytes an encoder makes from the pixels (formats/encoded_run.hpp: the
# GPU's encoders, or their CPU model) are byte for byte the files the formats' own encoders write.
#
#   formats     tar (shards of 5 and of 10,000), png, bmp and mosaic-png (37 columns, padding 2),
#               npy-u8, alone and together, for N = 1, 3, 127 and 1001 and pieces (--chunk) of 1, 64
#               and 300 images: the same files with the encoders on and off
#   level 1     png and tar at --png-level 1 (written from the pixels) beside bmp (encoded): the same
#   sizes       models of 32x32 (grey) and 128x128 images (common/model_spec.hpp): every encoded format,
#               padding a quarter of a tile, the same files on and off (on the cpu backend where the
#               device is synthetic, whose images are 64x64)
#   non-finite  a finite model whose images are NaN: the same sentence and exit status on and off,
#               nothing written
#   ranks       two MPI ranks (where mpirun runs): the same files on and off
#
# ENCODED_DEVICE=synthetic (default, any machine): the synthetic and cpu backends with the encoders'
# CPU model (FACEGEN_TEST_HOST_ENCODERS=1 against 0). ENCODED_DEVICE=cuda (a GPU machine): the GPU's
# encoders (FACEGEN_GPU_ENCODERS=1 against 0) on a random network, in fp32 and bf16, --batch 1, 64
# and 1000. Every run has a deadline. Usage: encoded_runs.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh encoded_runs
build=${1:-build}
prog=$build/facegen
[ -x "$prog" ] || { echo "encoded_runs: $prog is missing (run make)"; exit 1; }
device=${ENCODED_DEVICE:-synthetic}
work=$(mktemp -d /tmp/facegen-encoded.XXXXXX)
on_exit 'rm -rf "$work"'

if [ "$device" = cuda ]; then
  switch=FACEGEN_GPU_ENCODERS
  "$build/make-random-network" --seed 7 --output "$work/net.bin" > /dev/null || { echo "encoded_runs: no network"; exit 1; }
  model=(--model "$work/net.bin")
  nan_device=cuda
  precisions="fp32 bf16"
  batches="1 64 1000"
else
  switch=FACEGEN_TEST_HOST_ENCODERS
  model=()
  nan_device=cpu
  precisions=fp32
  batches=none  # the synthetic backend has no GPU batch, and --batch is refused there
fi

# run ON|OFF DIR ARGS...: the program with the encoders on or off, 300 s at most, its outputs in DIR
# (made empty first).
run() {
  local state=$1 dir=$2
  shift 2
  rm -rf "$dir" && mkdir -p "$dir"
  deadline 300 env "$switch=$state" "$build/facegen" --device "$device" "${model[@]}" --output "$dir/r" -q "$@" \
    > "$dir.stdout" 2> "$dir.stderr"
}

# same NAME ARGS...: the outputs with the encoders off, then on at every batch size: identical.
same() {
  local name=$1 b problem=
  shift
  if ! run 0 "$work/off" "$@"; then
    fail "$name" "with the encoders off: $(head -c 300 "$work/off.stderr")"
    return
  fi
  for b in $batches; do
    local batch=(--batch "$b")
    [ "$b" = none ] && batch=()
    if ! run 1 "$work/on" "$@" "${batch[@]}"; then
      problem="with the encoders on, --batch $b: $(head -c 300 "$work/on.stderr")"
      break
    fi
    if ! diff -r "$work/off" "$work/on" > "$work/diff" 2>&1; then
      problem="--batch $b: $(head -n 3 "$work/diff" | tr '\n' ' ')"
      break
    fi
  done
  [ -z "$problem" ] && pass "$name" || fail "$name" "$problem"
}

echo "outputs made by encoders ($device, $switch) against the formats' own encoders:"
for p in $precisions; do
  for n in 1 3 127 1001; do
    same "$p, $n images: tar in shards of 5, png, bmp, mosaic-png, npy-u8, pieces of 64" \
      --precision "$p" --random "$n" --seed 5 --formats tar,png,bmp,mosaic-png,npy-u8 --shard-images 5 \
      --grid-columns 37 --grid-padding 2 --chunk 64
  done
  same "$p, 1001 images: tar alone, pieces of 300" --precision "$p" --random 1001 --seed 6 --formats tar --chunk 300
  same "$p, 1001 images: bmp alone (a square grid), pieces of 1" --precision "$p" --random 1001 --seed 6 --formats bmp \
    --chunk 1
  same "$p, 300 images: png alone, split mosaic-png" --precision "$p" --random 300 --seed 8 --formats png,mosaic-png \
    --mosaic-tiles 8
  same "$p, 127 images: png and tar at level 1 beside bmp" --precision "$p" --random 127 --seed 9 --formats png,tar,bmp \
    --png-level 1 --chunk 64
done
same "seeds: tar in shards of 5, png, each image named by its seed" --seeds 3,1,4,15,9,2,6,5358979 --formats tar,png \
  --shard-images 5
same "1,902 seeds: png in subfolders and tar, named by seed" --seeds 7,100-2000,18446744073709551615 --formats png,tar \
  --png-layout subfolders --shard-images 500 --chunk 300

# Generators of the other image sizes: the encoders take the model's size.
saved_device=$device saved_model=("${model[@]}")
[ "$device" = cuda ] || device=cpu
"$build/make-random-network" --seed 32 --output "$work/m32.safetensors" --image-size 32 --nz 37 --ngf 48 --nc 1 \
  --kernel-size 5 --bias=true > /dev/null &&
"$build/make-random-network" --seed 128 --output "$work/m128.safetensors" --image-size 128 --ngf 16 > /dev/null ||
  { echo "encoded_runs: make-random-network failed"; exit 1; }
for size in 32 128; do
  model=(--model "$work/m$size.safetensors")
  for p in $precisions; do
    same "$size x $size, $p, 127 images: tar in shards of 5, png, bmp, mosaic-png, npy-u8, padding $((size / 4))" \
      --precision "$p" --random 127 --seed 5 --formats tar,png,bmp,mosaic-png,npy-u8 --shard-images 5 \
      --grid-columns 37 --grid-padding $((size / 4)) --chunk 64
  done
done
device=$saved_device model=("${saved_model[@]}")

# A finite model whose first layer overflows (tests/lib/overflowing_model.py): the images are NaN, and
# the run stops with the same sentence whichever makes the bytes.
if [ "$device" != cuda ]; then
  [ -f "$build/random-network.bin" ] || "$build/make-random-network" --seed 7 --output "$work/net.bin" > /dev/null
  [ -f "$build/random-network.bin" ] && cp "$build/random-network.bin" "$work/net.bin"
fi
nan_model=$work/nan.bin
/usr/bin/python3 tests/lib/overflowing_model.py "$work/net.bin" "$nan_model" tconv1 || echo "encoded_runs: no overflowing model"
nan_run() {  # nan_run ON|OFF: exit status, its stderr in $work/nan-STATE.stderr
  local state=$1
  rm -rf "$work/nan-$state" && mkdir -p "$work/nan-$state"
  deadline 120 env "$switch=$state" "$build/facegen" --device "$nan_device" --model "$nan_model" --random 5 --seed 1 \
    --formats tar,png,bmp --output "$work/nan-$state/r" -q 2> "$work/nan-$state.stderr"
}
nan_run 0
off_status=$?
nan_run 1
on_status=$?
if [ $off_status -eq 1 ] && [ $on_status -eq 1 ] && cmp -s "$work/nan-0.stderr" "$work/nan-1.stderr" &&
   [ -z "$(find "$work/nan-0" "$work/nan-1" -mindepth 1)" ]; then
  pass "NaN images: exit 1, the same sentence, nothing written"
else
  fail "NaN images" "status $off_status / $on_status: $(head -c 200 "$work/nan-0.stderr") / $(head -c 200 "$work/nan-1.stderr")"
fi

# Two MPI ranks share the job, each with the same engine.
if command -v mpirun > /dev/null 2>&1 && [ "$device" != cpu ]; then
  mpi_run() {  # mpi_run ON|OFF
    rm -rf "$work/mpi-$1" && mkdir -p "$work/mpi-$1"
    deadline 300 env "$switch=$1" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -np 2 --oversubscribe -x "$switch" "$build/facegen" --device "$device" "${model[@]}" --random 333 --seed 4 \
      --formats tar,png,bmp,npy-u8 --shard-images 50 --output "$work/mpi-$1/r" -q > "$work/mpi-$1.log" 2>&1
  }
  if ! mpi_run 0 || ! mpi_run 1; then
    if grep -qi "not enough slots\|no such file\|orte\|prte" "$work/mpi-0.log"; then
      skip "two MPI ranks: mpirun cannot start them here"
    else
      fail "two MPI ranks" "$(tail -n 3 "$work/mpi-1.log" | tr '\n' ' ')"
    fi
  elif diff -r "$work/mpi-0" "$work/mpi-1" > "$work/diff" 2>&1; then
    pass "two MPI ranks: tar, png, bmp and npy-u8 the same on and off"
  else
    fail "two MPI ranks" "$(head -n 3 "$work/diff" | tr '\n' ' ')"
  fi
else
  skip "two MPI ranks: no mpirun"
fi
suite_end
