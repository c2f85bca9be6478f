#!/usr/bin/env bash
# run_on_gpu.sh: the checks that need a CUDA GPU, in one go (for the GPU machine; takes a few minutes).
#
# Builds everything, runs the GPU unit tests, then runs facegen end to end on the GPU in each
# precision and on the CPU over the same random network and latents, and compares: worst absolute
# difference per precision, identical bytes across GPU batch sizes, and the GPU error paths.
# Logs go to $OUT (default /tmp/facegen-gpu). Exit status: 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-gpu}
mkdir -p "$out"
failures=0
check() {  # check NAME COMMAND...: runs it, reports ok/FAIL
  local name=$1
  shift
  if "$@" >> "$out/checks.log" 2>&1; then echo "ok    $name"; else echo "FAIL  $name"; failures=$((failures + 1)); fi
}

nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
make -j"$(nproc)" all > "$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
echo "commit ${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, $(date -u +%F)"

# A deadline (FACEGEN_TEST_TIMEOUT, default 900 s; the whole set took under 5 minutes on an H100 in
# 2026-11): a hung test fails the run instead of holding the machine.
timeout "${FACEGEN_TEST_TIMEOUT:-900}" ./build/facegen-gpu-tests 2>&1 | tee "$out/gpu-tests.log" | tail -n 4
[ "${PIPESTATUS[0]}" -eq 0 ] || failures=$((failures + 1))

work=build/gpu-check
mkdir -p "$work"
./build/make-random-network --seed 7 --output "$work/net.bin" > /dev/null
./build/make-latents --count 1000 --seed 3 --output "$work/latents.txt" > /dev/null
run() { ./build/facegen --model "$work/net.bin" --input "$work/latents.txt" --formats npy,txt,bmp --quiet "$@"; }
check "cpu run" run --device cpu --output "$work/cpu"
for p in fp32 tf32 bf16; do
  check "gpu $p run" run --device cuda --precision "$p" --output "$work/gpu-$p"
done
check "gpu fp32 --batch 1 run" run --device cuda --batch 1 --output "$work/gpu-b1"
check "gpu fp32 --batch 1000 run" run --device cuda --batch 1000 --output "$work/gpu-b1000"
check "gpu bytes identical for --batch 1, 512, 1000" bash -c "cmp $work/gpu-b1.npy $work/gpu-fp32.npy && cmp $work/gpu-b1000.npy $work/gpu-fp32.npy && cmp $work/gpu-b1.txt $work/gpu-fp32.txt"
python3 - "$work" <<'PY' | tee "$out/compare.txt"
import sys, numpy as np
work = sys.argv[1]
cpu = np.load(f"{work}/cpu.npy").astype(np.float64)
limits = {"fp32": 1e-5, "tf32": 7.5e-3, "bf16": 5e-2}
bad = 0
for p, limit in limits.items():
    gpu = np.load(f"{work}/gpu-{p}.npy").astype(np.float64)
    diff = np.abs(gpu - cpu).max()
    ok = diff <= limit and np.isfinite(gpu).all()
    bad += not ok
    print(f"{'ok   ' if ok else 'FAIL '} gpu {p} vs cpu over {cpu.shape[0]} images: max |diff| {diff:.3e} (limit {limit:g})")
t_cpu = open(f"{work}/cpu.txt").read().split()
t_gpu = open(f"{work}/gpu-fp32.txt").read().split()
print(f"      text values that differ between cpu and gpu fp32: {sum(a != b for a, b in zip(t_cpu, t_gpu))} of {len(t_cpu)}")
sys.exit(1 if bad else 0)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || failures=$((failures + 1))
./build/facegen --model "$work/net.bin" --input "$work/latents.txt" --output "$work/x" --device cuda --gpu 99 2> "$out/bad-gpu.txt"
status=$?
if [ $status -eq 1 ] && [ "$(wc -l < "$out/bad-gpu.txt")" -eq 1 ] && [ -z "$(ls "$work"/x.* 2>/dev/null)" ]; then
  echo "ok    --gpu 99: $(cat "$out/bad-gpu.txt")"
else
  echo "FAIL  --gpu 99: status $status: $(cat "$out/bad-gpu.txt")"; failures=$((failures + 1))
fi
./build/facegen --model "$work/net.bin" --input inputs/input3.txt --output "$work/timing" --device cuda | tee "$out/run-input3.txt"
echo "$failures checks failed"
[ $failures -eq 0 ]
