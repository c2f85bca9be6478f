#!/usr/bin/env bash
# run_round.sh: one measuring round on the GPU machine, in one go (about four minutes on an H200;
# less with FACEGEN_PREBUILT=1 and FACEGEN_SKIP_TORCH=1, see below).
#
# Builds everything, runs the GPU tests, writes a summary of the kernels' SASS (instruction counts
# per kernel: FFMA, LDS, LDSM, HMMA, LDGSTS), then build/facegen-bench --quick and
# bench/pytorch_reference.py with eager PyTorch only (no torch.compile). A failed test flags every
# line of the final table instead of skipping the timing. Logs and results.json go to $OUT (default
# /tmp/facegen-round), the benchmark's large inputs and images to build/round; the table prints last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-round}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
echo "commit ${FACEGEN_COMMIT:-unknown}, $(date -u +%F)"
# FACEGEN_PREBUILT=1: use build/ as carried (built elsewhere with CPU_ARCH=x86-64-v3), to save the
# minute or two of device time the CUDA build takes.
if [ "${FACEGEN_PREBUILT:-0}" = 1 ] && [ -x build/facegen-gpu-tests ] && [ -x build/facegen-bench ]; then
  echo "using the carried build/"
else
  make -j"$(nproc)" all > "$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
fi

timeout "${FACEGEN_TEST_TIMEOUT:-300}" ./build/facegen-gpu-tests 2>&1 | tee "$out/gpu-tests.log" | grep -E "worst|seed|test cases|assertions|Status|ERROR|FAIL" | head -n 40
tests_rc=${PIPESTATUS[0]}
echo "GPU tests exit status: $tests_rc"
# Timed anyway when a test fails (the one call may be all there is), but flagged on every table line.
flag=""
[ "$tests_rc" -eq 0 ] || flag="  [GPU TESTS FAILED]"

if command -v cuobjdump > /dev/null; then
  for o in build/kernels/generator_gpu.cu.o build/kernels/phase_gemm_wgmma.cu.o; do cuobjdump -sass "$o" 2> /dev/null; done | python3 -c '
import re, sys
fn, counts, arch = None, {}, "?"
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if "arch = " in line:
        arch = line.split("arch = ")[1].split()[0]
    if m:
        fn = arch + " " + m.group(1); counts[fn] = {}
        continue
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
    if fn and m:
        op = m.group(1)
        counts[fn][op] = counts[fn].get(op, 0) + 1
for fn, c in counts.items():
    keys = ["FFMA", "LDS", "LDSM", "HMMA", "HGMMA", "UTMALDG", "SYNCS", "LDGSTS", "LDG", "STG", "BAR", "MUFU", "LDL", "STL"]
    print(fn[:90], " ".join(f"{k}={c.get(k, 0)}" for k in keys), "total=%d" % sum(c.values()))
' > "$out/sass-summary.txt"
  grep -E "output_tanh|wgmma" "$out/sass-summary.txt" | grep sm_90
fi

work=build/round  # the benchmark's inputs and images (tens of MB) stay out of $OUT
mkdir -p "$work"
timeout "${FACEGEN_BENCH_TIMEOUT:-240}" ./build/facegen-bench --out "$work" --quick 2>&1 | tee "$out/bench.log" | grep -E "ceilings|layer|batch |variant|MISMATCH|GEMM" | cut -c1-260
# FACEGEN_SKIP_TORCH=1: no PyTorch (its eager numbers change only with torch or the device).
[ "${FACEGEN_SKIP_TORCH:-0}" = 1 ] && { cp "$work/results.json" "$out/" 2> /dev/null; exit "$tests_rc"; }
PYTHONUNBUFFERED=1 timeout 120 python3 bench/pytorch_reference.py --dir "$work" --compile-budget 0 2>&1 | tee "$out/torch.log" | tail -n 16 | sed "s/\$/$flag/"
cp "$work/results.json" "$out/" 2> /dev/null
