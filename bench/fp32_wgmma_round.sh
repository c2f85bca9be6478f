#!/usr/bin/env bash
# fp32_wgmma_round.sh: one GPU call for float32 on Hopper's tensor cores (3xTF32 on wgmma,
# kernels/phase_gemm_wgmma_tf32x3.cuh; docs/gpu.md), at most 9 minutes on one H100 or H200: build,
# the kernels' SASS checked, Nsight Compute on today's tf32 wgmma kernels and the new ones, the GPU
# tests of the fp32 paths, facegen-bench --fp32-tc, PyTorch's side, compute-sanitizer over the new
# kernels, and a short table last. Building on the GPU machine leaves the later steps less time: a
# carried build (FACEGEN_PREBUILT=1) gets through all of them; where the deadline comes first, the
# last steps are reported as skipped.
#
#   bash bench/fp32_wgmma_round.sh    (carry .deps where the machine lacks the build's headers: the
#                                      Debian packages gathered by ../shared/tools/device-deps.sh or
#                                      apt-get download into .deps/debs, unpacked by
#                                      bench/device_packages.sh only where a header is missing)
#
# Steps in this order, each with a deadline (the whole run stops at FACEGEN_ROUND_SECONDS, default
# 540 s, after its start; a step that would start too late is reported as skipped):
#   build      make CUDA_ARCH=90a (FACEGEN_PREBUILT=1 with a carried build/facegen, facegen-bench,
#              facegen-gpu-tests and random-network.bin skips it)
#   sass       cuobjdump: HGMMA in every float32 wgmma kernel, no local-memory spills (LDL/STL)
#   ncu        Nsight Compute (--clock-control none, each call under a 30 s timeout, one kernel a call
#              from facegen-bench --fp32-tc-layer) on tconv1-3 of the faces model at batch 8192 in
#              tf32 (the wgmma image kernel) and fp32 v3 (below), and v3's tconv1 at 64
#   tests      build/facegen-gpu-tests, the fp32 cases (the wgmma kernels in every tile shape and
#              schedule against mma.sync, every layer against float64 with poisoned outputs at batch
#              sizes up to 1000, the pipeline, FACEGEN_GPU_FP32's choice, the CUDA backend against
#              the CPU one)
#   bench      build/facegen-bench --fp32-tc --quick: the mma probe; images/s at batch 64, 512 and
#              8192 of fp32 FFMA (v1), tensor cores on mma.sync (v2) and on wgmma (v3), tf32, bf16,
#              faces model and SHPC network; every layer in v1-v5 (v4, v5: v3's schedules 1 and 2,
#              the same bits and an FADD every two k steps) at the three batches; errors against
#              float64 of 1,000 faces and 200 images of a random network of each family, layer by
#              layer and whole
#   torch      bench/pytorch_reference.py --fp32-tc: PyTorch fp32's errors on the same images, verdict
#   sanitizer  memcheck, synccheck and initcheck over the wgmma-form test case (8 images), racecheck
#              over facegen --precision fp32 (the wgmma kernels by default) in both tile shapes, k 4 and 5
# Logs go to $OUT (default /tmp/facegen-fp32wgmma), the benchmark's files to build/fp32wgmma. Exit
# status 0 when every step ran and passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/facegen-fp32wgmma}
mkdir -p "$out"
start=$SECONDS
end=$((start + ${FACEGEN_ROUND_SECONDS:-540}))
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
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
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
  run_step build 300 make -j"$(nproc)" CUDA=1 CUDA_ARCH=90a build/facegen-gpu-tests build/facegen-bench build/facegen \
    build/random-network.bin || { tail -n 30 "$out/build.log"; exit 1; }
fi

# SASS: every float32 wgmma kernel (tconv_phase_wgmma_tf32x3) has HGMMA instructions and no LDL/STL.
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
if [ -x "$cuobjdump" ]; then
  run_step sass 60 bash -c "'$cuobjdump' -sass build/facegen-bench | awk '
    /Function :/ { f = \$0; sub(/.*Function : /, \"\", f); keep = f ~ /tconv_phase_wgmma_tf32x3/; if (keep) n++ }
    keep && /HGMMA/ { hgmma[f]++ } keep && /(LDL|STL)/ { local[f]++ }
    END { bad = n == 0; for (k in hgmma) seen++
          printf \"%d float32 wgmma kernels, %d with HGMMA\\n\", n, seen
          for (k in hgmma) printf \"  %4d HGMMA, %d LDL/STL  %s\\n\", hgmma[k], local[k] + 0, k
          for (k in local) if (local[k] > 0) bad = 1  # printf above made an entry for every kernel
          exit (bad || seen != n) }'"
else
  result[sass]="skipped (no cuobjdump)"
fi

# Nsight Compute, one kernel a call: the third launch of the stage's phase GEMM (facegen-bench
# --fp32-tc-layer runs it three times and nothing else).
ncu_bin=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
if [ -x "$ncu_bin" ]; then
  ncu_fail=0 ncu_runs=0
  for spec in faces:tf32:0:8192 faces:tf32:1:8192 faces:tf32:2:8192 faces:fp32_wgmma:0:8192 faces:fp32_wgmma:1:8192 \
              faces:fp32_wgmma:2:8192 faces:fp32_wgmma:0:64; do
    [ $((end - SECONDS)) -lt 300 ] && break  # the tests and the benchmark come first
    echo "== $spec" >> "$out/ncu.log"
    timeout -k 5 30 "$ncu_bin" --clock-control none -k regex:tconv_phase --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section LaunchStats --section Occupancy --section WarpStateStats \
      build/facegen-bench --fp32-tc-layer "$spec" >> "$out/ncu.log" 2>&1 || ncu_fail=$((ncu_fail + 1))
    ncu_runs=$((ncu_runs + 1))
  done
  if [ $ncu_fail -eq 0 ] && [ $ncu_runs -eq 7 ]; then result[ncu]="ok (7 kernels)"; else result[ncu]="FAIL: $ncu_fail of $ncu_runs calls failed, $((7 - ncu_runs)) not run (time)"; fi
else
  result[ncu]="skipped (no ncu)"
fi

cases='fp32 on wgmma*,phase-GEMM transposed*,FACEGEN_GPU_FP32*,fp32 on tensor cores*,*image tiles give the same bytes*'
cases+=',pipeline images*,CUDA backend matches the CPU backend*,CUDA backend results do not depend*'
run_step tests 150 env FACEGEN_GPU_TEST_MAX_BATCH=1000 build/facegen-gpu-tests -tc="$cases"
grep -E "test cases|assertions" "$out/tests.log" | tail -n 2

work=build/fp32wgmma
mkdir -p "$work"
run_step bench 210 build/facegen-bench --fp32-tc --quick --out "$work"
cp "$work/results.json" "$out/" 2> /dev/null

run_step torch 75 env PYTHONUNBUFFERED=1 python3 bench/pytorch_reference.py --fp32-tc --dir "$work"

sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if [ -x "$sanitizer" ]; then
  wgmma_case='fp32 on wgmma*'
  run_step memcheck 90 env FACEGEN_GPU_TEST_MAX_BATCH=8 "$sanitizer" --tool memcheck --error-exitcode 99 \
    build/facegen-gpu-tests -tc="$wgmma_case"
  run_step synccheck 60 env FACEGEN_GPU_TEST_MAX_BATCH=8 "$sanitizer" --tool synccheck --error-exitcode 99 \
    build/facegen-gpu-tests -tc="$wgmma_case"
  run_step initcheck 60 env FACEGEN_GPU_TEST_MAX_BATCH=8 "$sanitizer" --tool initcheck --error-exitcode 99 \
    build/facegen-gpu-tests -tc="$wgmma_case"
  race_fail=0 race_runs=0
  for model in build/random-network.bin models/facegen-faces.safetensors; do
    for tiles in small large; do
      [ $((end - SECONDS)) -lt 20 ] && break 2
      name=race-$(basename "$model" | cut -d. -f1)-$tiles
      rm -f "$work/$name".*
      FACEGEN_GPU_TILES=$tiles timeout -k 5 60 "$sanitizer" --tool racecheck --error-exitcode 99 \
        build/facegen --device cuda --precision fp32 --random 3 --batch 3 --formats npy --quiet --model "$model" \
        --output "$work/$name" >> "$out/racecheck.log" 2>&1 || race_fail=$((race_fail + 1))
      race_runs=$((race_runs + 1))
    done
  done
  if [ $race_fail -eq 0 ] && [ $race_runs -eq 4 ]; then
    result[racecheck]="ok (facegen fp32 on wgmma, k 5 and 4, Small and Large tiles)"
  else
    result[racecheck]="FAIL: $race_fail of $race_runs runs failed, $((4 - race_runs)) not run (time)"
  fi
else
  result[memcheck]="skipped (no compute-sanitizer)"
fi

# The short table: images/s of the kernels alone against the targets, the layers, the errors.
python3 - "$out/results.json" "$out/torch.log" "$out/ncu.log" <<'PY'
import json, re, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no results.json: {e}"); sys.exit(0)
targets = {64: 1.2, 512: 1.5, 8192: 2.0}
print("\nimages/s, kernels alone   batch   fp32 FFMA (v1)  tc mma.sync (v2)  tc wgmma (v3)  v3/v1 (target)        tf32        bf16")
for m, label in (("faces", "faces model"), ("shpc", "SHPC network")):
    for b in (64, 512, 8192):
        g = lambda k: r.get(f"{m}_{k}_b{b}_kernels", 0)
        ratio = g("fp32_wgmma") / g("fp32_ffma") if g("fp32_ffma") else 0
        mark = "met" if ratio >= targets[b] else "MISSED"
        print(f"  {label:22s} {b:6d} {g('fp32_ffma'):15,.0f} {g('fp32_tc'):17,.0f} {g('fp32_wgmma'):14,.0f}  "
              f"{ratio:4.2f}x (>= {targets[b]}: {mark}) {g('tf32'):11,.0f} {g('bf16'):11,.0f}")
print("\nms a layer, batch 8192 / 64: v1 FFMA, v2 tc mma.sync, v3 tc wgmma, v4 wgmma schedule 1, v5 wgmma FADD / 2 steps")
names = ["projection", "tconv1", "tconv2", "tconv3", "tconv4"]
for m in ("faces", "shpc"):
    for l, name in enumerate(names):
        cells = []
        for b in (8192, 64):
            cells.append(" ".join(f"{r.get(f'{m}_{v}_layer{l}_b{b}_ms', float('nan')):7.3f}"
                                  for v in ("fp32_ffma", "fp32_tc", "fp32_wgmma", "fp32_wgmma1", "fp32_wgmma_r2")))
        print(f"  {m:6s} {name:11s} {cells[0]}  |  {cells[1]}")
print("\n|error| vs float64, worst / mean (whole network): v1 FFMA, v2 tc mma.sync, v3 tc wgmma, v5 wgmma FADD / 2 steps")
for key in ("faces", "rfaces", "rshpc"):
    vals = [(r.get(f"{key}_{v}_network_worst"), r.get(f"{key}_{v}_network_mean"))
            for v in ("fp32_ffma", "fp32_tc", "fp32_wgmma", "fp32_wgmma_r2")]
    if vals[0][0] is not None:
        print(f"  {key:7s} " + "   ".join(f"{w:.3e} / {m:.3e}" for w, m in vals))
try:
    for line in open(sys.argv[2]):
        if line.startswith("verdict") or "OVER 1.5" in line:
            print("  torch log: " + line.rstrip())
except OSError:
    pass
try:
    spec = None
    for line in open(sys.argv[3]):
        if line.startswith("== "):
            spec = line[3:].strip()
        for metric in ("Duration", "Compute (SM) Throughput", "Memory Throughput", "Registers Per Thread"):
            if spec and line.strip().startswith(metric):
                print(f"  ncu {spec:24s} {' '.join(line.split())}")
except OSError:
    pass
PY
echo
failures=0
for step in build sass tests bench ncu torch memcheck synccheck initcheck racecheck; do
  [ -n "${result[$step]:-}" ] || continue
  printf '%-10s %s\n' "$step" "${result[$step]}"
  case "${result[$step]}" in ok*|carried*) ;; *) failures=$((failures + 1)) ;; esac
done
echo "$failures steps failed or skipped; logs in $out ($((SECONDS - start)) s)"
[ $failures -eq 0 ]
