#!/usr/bin/env bash
# fp32_tc_round.sh: one GPU call for float32 on tensor cores (3xTF32, docs/gpu.md), under 8 minutes on
# one H100 or H200: build, the GPU tests of the fp32 paths, facegen-bench --fp32-tc, PyTorch's side of
# it, compute-sanitizer over the new kernels, and a short table last.
#
#   bash bench/fp32_tc_round.sh       (carry .deps: the Debian packages the build needs, gathered by
#                                      ../shared/tools/device-deps.sh or apt-get download into .deps/debs;
#                                      unpacked only where doctest's or cxxopts' header is missing)
#
# Steps, each with a deadline (the whole run stops at FACEGEN_ROUND_SECONDS, default 470 s, after its
# start; a step that would start too late is reported as skipped):
#   build      make CUDA_ARCH=90a (FACEGEN_PREBUILT=1 with a carried build/ skips it)
#   tests      build/facegen-gpu-tests, the cases of every fp32 path (layers, pipelines, tiles, the
#              any-shape kernels, fp32 tensor cores against FFMA against float64, the CPU backend),
#              batches up to 1000
#   bench      build/facegen-bench --fp32-tc --quick: the mma probe, side-by-side images/s at batch 64,
#              512 and 8192 (fp32 FFMA, fp32 tensor cores, tf32, bf16; faces model and SHPC network),
#              per-layer variants, 1,000 faces images against float64
#   torch      bench/pytorch_reference.py --fp32-tc: PyTorch fp32's errors on the same 1,000 images
#   sanitizer  memcheck, synccheck and initcheck over the fp32 cases of the GPU tests (8 images each),
#              racecheck over facegen --precision fp32 in both tile shapes and both kernel sizes
# Logs go to $OUT (default /tmp/facegen-fp32tc), the benchmark's files to build/fp32tc. Exit status 0
# when every step ran and passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-fp32tc}
mkdir -p "$out"
start=$SECONDS
end=$((start + ${FACEGEN_ROUND_SECONDS:-470}))
declare -A result
# run_step NAME CAP COMMAND...: runs COMMAND with a timeout of min(CAP, time left), output to $out/NAME.log
run_step() {
  local name=$1 cap=$2
  shift 2
  local left=$((end - SECONDS))
  if [ "$left" -lt 20 ]; then
    result[$name]="skipped (no time left)"
    echo "skip  $name: no time left"
    return 1
  fi
  local limit=$((cap < left ? cap : left)) t0=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then result[$name]="ok (${took} s)"; else result[$name]="FAIL: exit $rc after ${took} s (limit $limit s)"; fi
  echo "$name: ${result[$name]}"
  return $rc
}

. bench/device_packages.sh  # the carried packages, only where the build's headers are missing
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$out/gpu.txt"
commit=${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}
echo "commit $commit, $(date -u '+%F %H:%M UTC')"

if [ "${FACEGEN_PREBUILT:-0}" = 1 ] && [ -x build/facegen-gpu-tests ] && [ -x build/facegen-bench ] && [ -x build/facegen ]; then
  result[build]="carried build/"
else
  run_step build 240 make -j"$(nproc)" CUDA=1 CUDA_ARCH=90a build/facegen-gpu-tests build/facegen-bench build/facegen \
    build/random-network.bin || { tail -n 30 "$out/build.log"; exit 1; }
fi

cases='projection + batch norm*,phase-GEMM transposed*,last transposed convolution*,pipeline images*,FACEGEN_GPU_FP32*'
cases+=',fp32 on tensor cores*,*image tiles give the same bytes*,every layer matches*,the any-shape kernels agree*'
cases+=',CUDA backend matches the CPU backend*,CUDA backend results do not depend*'
run_step tests 200 env FACEGEN_GPU_TEST_MAX_BATCH=1000 build/facegen-gpu-tests -tc="$cases"
grep -E "test cases|assertions" "$out/tests.log" | tail -n 2

work=build/fp32tc
mkdir -p "$work"
run_step bench 150 build/facegen-bench --fp32-tc --quick --out "$work"
cp "$work/results.json" "$out/" 2> /dev/null
run_step torch 75 env PYTHONUNBUFFERED=1 python3 bench/pytorch_reference.py --fp32-tc --dir "$work"

sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ -x "$sanitizer" ]; then
  run_step memcheck 90 "$sanitizer" --tool memcheck --error-exitcode 99 \
    build/facegen-gpu-tests -tc='fp32 on tensor cores*,FACEGEN_GPU_FP32*'
  run_step synccheck 60 "$sanitizer" --tool synccheck --error-exitcode 99 \
    build/facegen-gpu-tests -tc='fp32 on tensor cores is as exact as FFMA against float64 on the any-shape*'
  run_step initcheck 60 "$sanitizer" --tool initcheck --error-exitcode 99 \
    build/facegen-gpu-tests -tc='fp32 on tensor cores is as exact as FFMA against float64, layer by layer*'
  race_fail=0 race_runs=0
  for model in build/random-network.bin models/facegen-faces.safetensors; do
    for tiles in small large; do
      [ $((end - SECONDS)) -lt 20 ] && break 2
      name=race-$(basename "$model" | cut -d. -f1)-$tiles
      rm -f "$work/$name".*
      FACEGEN_GPU_FP32=tc FACEGEN_GPU_TILES=$tiles timeout 60 "$sanitizer" --tool racecheck --error-exitcode 99 \
        build/facegen --device cuda --precision fp32 --random 3 --batch 3 --formats npy --quiet --model "$model" \
        --output "$work/$name" >> "$out/racecheck.log" 2>&1 || race_fail=$((race_fail + 1))
      race_runs=$((race_runs + 1))
    done
  done
  if [ $race_fail -eq 0 ] && [ $race_runs -eq 4 ]; then
    result[racecheck]="ok (facegen fp32 on tensor cores, k 5 and 4, Small and Large tiles)"
  else
    result[racecheck]="FAIL: $race_fail of $race_runs runs failed, $((4 - race_runs)) not run (time)"
  fi
else
  result[memcheck]="skipped (no compute-sanitizer)"
fi

# The short table: kernels alone (images/s) and the faces model's errors against float64.
python3 - "$out/results.json" "$out/torch.log" <<'PY'
import json, re, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no results.json: {e}"); sys.exit(0)
print("\nimages/s, kernels alone      batch      fp32 FFMA   fp32 tensor cores  (x FFMA)        tf32        bf16")
for m, label in (("faces", "faces model"), ("shpc", "SHPC network")):
    for b in (64, 512, 8192):
        g = lambda k: r.get(f"{m}_{k}_b{b}_kernels", 0)
        ratio = g("fp32_tc") / g("fp32_ffma") if g("fp32_ffma") else 0
        print(f"  {label:22s} {b:8d} {g('fp32_ffma'):14,.0f} {g('fp32_tc'):19,.0f}  ({ratio:4.2f}x) {g('tf32'):11,.0f} {g('bf16'):11,.0f}")
print("\nfaces model, 1,000 images, |error| vs float64, worst / mean:")
for k, label in (("fp32_ffma", "facegen fp32 FFMA"), ("fp32_tc", "facegen fp32 tensor cores"), ("tf32", "facegen tf32"), ("bf16", "facegen bf16")):
    w, m = r.get(f"faces_{k}_network_worst"), r.get(f"faces_{k}_network_mean")
    if w is not None:
        print(f"  {label:26s} {w:.3e} / {m:.3e}")
try:
    for line in open(sys.argv[2]):
        if line.strip().startswith("network (images)") or line.startswith("verdict"):
            print("  torch log: " + line.strip())
except OSError:
    pass
PY
echo
failures=0
for step in build tests bench torch memcheck synccheck initcheck racecheck; do
  [ -n "${result[$step]:-}" ] || continue
  printf '%-10s %s\n' "$step" "${result[$step]}"
  case "${result[$step]}" in ok*|carried*) ;; *) failures=$((failures + 1)) ;; esac
done
echo "$failures steps failed or skipped; logs in $out ($((SECONDS - start)) s)"
[ $failures -eq 0 ]
