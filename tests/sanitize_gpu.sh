#!/usr/bin/env bash
# sanitize_gpu.sh: the GPU code under compute-sanitizer (GPU machine only; about 3 minutes).
#
# memcheck (out-of-bounds and misaligned accesses, leaks of device memory), initcheck (reads of
# device memory nothing wrote) and synccheck over build/facegen-gpu-tests at batch sizes up to 1000,
# which run every kernel in both tile shapes; then racecheck (shared-memory hazards) over facegen
# itself, 3 images in each precision (fp32 in both its kernels, tensor cores and FFMA: FACEGEN_GPU_FP32)
# with the tiles forced Small, Large and (on sm_90, where the wgmma image kernel runs tconv1-3) image
# (FACEGEN_GPU_TILES): every
# kernel instance the program launches, each once (racecheck follows every shared-memory access and
# took over five minutes on the GPU tests even at 3 images), and over the any-shape kernels' GPU test
# case at 3 images; then memcheck and initcheck over one
# small facegen run. Each tool's report goes to $OUT (default /tmp/facegen-sanitize-gpu); a tool that
# reports anything fails the script.
#
# The build keeps -lineinfo (PROFILE=1) so reports name source lines. GPU_TEST_ARGS passes doctest
# options, e.g. GPU_TEST_ARGS='--test-case-exclude=*network*'.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-sanitize-gpu}
mkdir -p "$out"
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$sanitizer" ] || { echo "sanitize_gpu: compute-sanitizer not found (CUDA Toolkit)"; exit 77; }
nvidia-smi -L > /dev/null 2>&1 || { echo "sanitize_gpu: no GPU here"; exit 77; }
make -j"$(nproc)" PROFILE=1 all build/random-network.bin > "$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }

failures=0
for tool in memcheck initcheck synccheck; do
  extra=()
  [ $tool = memcheck ] && extra=(--leak-check full)
  start=$SECONDS
  # Batch sizes up to 1000 take both tile shapes of every layer (small grids and full ones).
  cap=${FACEGEN_GPU_TEST_MAX_BATCH:-1000}
  FACEGEN_GPU_TEST_MAX_BATCH=$cap timeout "${SANITIZE_TIMEOUT:-900}" "$sanitizer" --tool $tool "${extra[@]}" --error-exitcode 99 \
    build/facegen-gpu-tests ${GPU_TEST_ARGS:-} > "$out/$tool.log" 2>&1
  status=$?
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tail -n1)
  if [ $status -eq 0 ]; then
    echo "ok    $tool over the GPU tests, batches up to $cap ($((SECONDS - start)) s): ${summary:-no report}"
  else
    failures=$((failures + 1))
    echo "FAIL  $tool over the GPU tests: exit status $status: ${summary:-see $out/$tool.log}"
    grep -m 10 -E '^========= (Invalid|Race|Uninitialized|Barrier|Leaked|Program hit)' "$out/$tool.log"
  fi
done

# racecheck: every kernel instance facegen launches, at 3 images (a hazard is within one block, and
# each block runs the whole shared-memory protocol whatever the batch); tf32, bf16 and fp32 on tensor
# cores through both GEMM kernel families where the GPU has two (wgmma, chosen by default on sm_90,
# and mma.sync); for both
# kernel sizes the tuned kernels take: a random SHPC network (5x5) and the faces model (4x4).
gemms=auto
[ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1)" = 9.0 ] && gemms="auto mma"
for model in build/random-network.bin models/facegen-faces.safetensors; do
k=k5
[ "$model" = models/facegen-faces.safetensors ] && k=k4
for arithmetic in fp32:tc fp32:ffma tf32:auto bf16:auto; do
  precision=${arithmetic%%:*} fp32_kernel=${arithmetic#*:}
  shapes="small large"
  [ "$gemms" != auto ] && shapes="small large image"
  for tiles in $shapes; do
  for gemm in $gemms; do
    [ $fp32_kernel = ffma ] && [ $gemm = mma ] && continue  # FFMA has no GEMM family to choose
    # The image tiles exist for tf32 and bf16 on wgmma only (elsewhere they are the Large ones, already checked).
    [ $tiles = image ] && { [ $precision = fp32 ] || [ $gemm = mma ]; } && continue
    start=$SECONDS
    run=$k-$precision-$fp32_kernel-$tiles-$gemm
    FACEGEN_GPU_FP32=$fp32_kernel FACEGEN_GPU_GEMM=$gemm FACEGEN_GPU_TILES=$tiles timeout "${SANITIZE_TIMEOUT:-900}" "$sanitizer" --tool racecheck --error-exitcode 99 \
      ./build/facegen --device cuda --precision $precision --random 3 --batch 3 --formats npy --quiet \
      --model $model --output "$out/race-$run" > "$out/racecheck-$run.log" 2>&1
    status=$?
    summary=$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/racecheck-$run.log" | tail -n1)
    if [ $status -eq 0 ]; then
      echo "ok    racecheck over facegen ($k) --precision $precision ($fp32_kernel), $tiles tiles, GEMM $gemm, 3 images ($((SECONDS - start)) s): ${summary:-no report}"
    else
      failures=$((failures + 1))
      echo "FAIL  racecheck over facegen ($k) --precision $precision ($fp32_kernel), $tiles tiles, GEMM $gemm: exit status $status: ${summary:-see $out/racecheck-$run.log}"
      grep -m 10 -E '^========= (Race|Error|Warning)' "$out/racecheck-$run.log"
    fi
  done
  done
done
done

# racecheck over the any-shape kernels (every layer outside the fixed-shape kernels' widths): each tile shape, both
# kernel sizes and every precision, at up to 3 images.
start=$SECONDS
FACEGEN_GPU_TEST_MAX_BATCH=3 timeout "${SANITIZE_TIMEOUT:-900}" "$sanitizer" --tool racecheck --error-exitcode 99 \
  build/facegen-gpu-tests -tc='any-shape kernels in every tile shape*' > "$out/racecheck-any-shape.log" 2>&1
status=$?
summary=$(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$out/racecheck-any-shape.log" | tail -n1)
if [ $status -eq 0 ]; then
  echo "ok    racecheck over the any-shape kernels, every tile shape and precision, 3 images ($((SECONDS - start)) s): ${summary:-no report}"
else
  failures=$((failures + 1))
  echo "FAIL  racecheck over the any-shape kernels: exit status $status: ${summary:-see $out/racecheck-any-shape.log}"
  grep -m 10 -E '^========= (Race|Error|Warning)' "$out/racecheck-any-shape.log"
fi

# One end-to-end run: the pipeline's own allocations, copies and streams.
./build/make-latents --count 100 --seed 5 --output "$out/latents.txt" > /dev/null
for tool in memcheck initcheck; do
  "$sanitizer" --tool $tool --error-exitcode 99 ./build/facegen --device cuda --batch 32 --quiet \
    --model build/random-network.bin --input "$out/latents.txt" --output "$out/run-$tool" > "$out/run-$tool.log" 2>&1
  status=$?
  if [ $status -eq 0 ]; then
    echo "ok    $tool over facegen --device cuda, 100 images, --batch 32"
  else
    failures=$((failures + 1))
    echo "FAIL  $tool over facegen: exit status $status (see $out/run-$tool.log)"
  fi
done
echo "$failures sanitizer runs failed"
[ $failures -eq 0 ]
