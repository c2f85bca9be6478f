#!/usr/bin/env bash
# valgrind.sh: small end-to-end runs of build/facegen under valgrind's memcheck: no invalid access,
# no use of uninitialized values, no definite or indirect leak, on success and on an error path.
#
# The program under test is build-vg/facegen (make valgrind-build: CUDA=0, -march=x86-64), so no
# CUDA runtime and no suppressions. valgrind hides AVX-512 from the program, so the CPU backend runs
# its AVX2 kernels (or SSE2 where the CPU has no AVX2), and one run forces the SSE2 kernels through
# FACEGEN_CPU_ISA; each run's backend line is shown beside its result. The model and latents
# come from the main build dir. Exit 0 clean, 77 skipped (no valgrind, no build-vg, or the sanitizer
# pass), else a finding. Usage: valgrind.sh [build-dir]
# runner: needs valgrind (build-vg/, built beside the first suites)
set -u
cd "$(dirname "$0")/../.."
. tests/lib/on_exit.sh
build=${1:-build}
if [ "${SANITIZE:-0}" = 1 ]; then
  echo "skip: valgrind cannot run AddressSanitizer binaries; this suite runs in the plain pass"
  exit 77
fi
command -v valgrind > /dev/null || { echo "skip: valgrind is not installed (make test-deps)"; exit 77; }
prog=build-vg/facegen
[ -x "$prog" ] || { echo "skip: $prog is not built (make valgrind-build)"; exit 77; }
work=$(mktemp -d /tmp/facegen-valgrind.XXXXXX)
on_exit 'rm -rf "$work"'
"$build/make-latents" --count 2 --seed 3 --output "$work/l2.txt" > /dev/null || exit 1
printf '1\n0.5 nan\n' > "$work/bad.txt"
failures=0
vg() {  # vg NAME WANT-STATUS ARGS...: facegen under memcheck
  local name=$1 want=$2
  shift 2
  valgrind --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect \
    --errors-for-leak-kinds=definite,indirect --track-origins=yes --log-file="$work/$name.vg" \
    "$prog" --device cpu --threads 2 --model "$build/random-network.bin" "$@" > "$work/$name.out" 2>&1
  local got=$?
  local summary
  summary=$(grep -E 'ERROR SUMMARY' "$work/$name.vg" | sed 's/^==[0-9]*== //')
  local backend
  backend=$(grep -m 1 -E '^backend' "$work/$name.out" | sed 's/^backend *//')
  if [ $got -eq "$want" ]; then
    echo "  ok    $name: exit $got; $summary${backend:+; $backend}"
  else
    failures=$((failures + 1))
    echo "  FAIL  $name: exit status $got, expected $want; $summary"
    grep -A 12 -m 3 -E 'Invalid|uninitialised|definitely lost|indirectly lost' "$work/$name.vg" | head -n 40
  fi
}
echo "valgrind memcheck:"
vg "2 images, txt, bmp and npy" 0 --input "$work/l2.txt" --output "$work/r" --formats txt,bmp,npy
FACEGEN_CPU_ISA=sse2 vg "2 images, the SSE2 kernels" 0 --input "$work/l2.txt" --output "$work/s" --formats npy
cmp -s "$work/r.npy" "$work/s.npy" && { failures=$((failures + 1)); echo "  FAIL  SSE2 and AVX2 gave the same bytes: was the SSE2 path taken?"; }
vg "a NaN in the input (error path)" 1 --input "$work/bad.txt" --output "$work/bad"
[ $failures -eq 0 ]
