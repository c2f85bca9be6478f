#!/usr/bin/env bash
# make_install.sh: the paths make run and make run_parallel accept, and make install.
#
# make run: INPUT as a bare name (inputs/NAME.txt), a path with or without .txt, a missing one (one
# line, non-zero); OUTPUT bare, relative with '/', absolute; without OUTPUT, named after the input.
# make install into a temporary PREFIX (with DESTDIR): the installed facegen finds its model and
# writes the same files as the build tree's; the installed facegen-run-parallel finds the installed
# facegen and a 2-rank job writes them too. The make calls use a scratch BUILD and treat the built
# program and make-latents as up to date (-o), so they neither rebuild nor touch build/ (install needs
# both; without the second, make compiled the whole library again into the scratch BUILD).
# Usage: tests/suites/make_install.sh [build-dir]; exit 0 pass, 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh make_install
build=${1:-build}
prog=$(cd "$(dirname "$build/facegen")" && pwd)/facegen
[ -x "$prog" ] || { echo "make_install: $prog is missing (run make)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d /tmp/facegen-install.XXXXXX)
on_exit 'rm -rf "$work"'
latents_tool=$(dirname "$prog")/make-latents
[ -x "$latents_tool" ] || { echo "make_install: $latents_tool is missing (run make)"; exit 1; }
mk() {
  make --no-print-directory -s BUILD="$work/mk" PROGRAM="$prog" LATENTS_TOOL="$latents_tool" \
    -o "$prog" -o "$latents_tool" "$@"
}

# dry_run NAME EXPECTED ARGS...: make -n ARGS prints a facegen command line containing EXPECTED.
dry_run() {
  local name=$1 expected=$2 line
  shift 2
  line=$(mk -n "$@" 2>&1 | grep -- '--output' | head -1)
  case $line in
    *"$expected"*) pass "$name" ;;
    *) fail "$name" "expected '$expected' in: $line" ;;
  esac
}

echo "make run and make run_parallel paths:"
dry_run "bare INPUT name" "--input inputs/input1.txt --output outputs/output1" run INPUT=input1 OUTPUT=output1
dry_run "INPUT path with .txt" "--input inputs/input1.txt --output outputs/output1" run INPUT=inputs/input1.txt OUTPUT=output1
dry_run "INPUT path without .txt" "--input inputs/input1.txt" run INPUT=inputs/input1 OUTPUT=output1
dry_run "absolute OUTPUT" "--output /tmp/abs " run INPUT=input1 OUTPUT=/tmp/abs
dry_run "relative OUTPUT path" "--output sub/x " run INPUT=input1 OUTPUT=sub/x.txt
dry_run "no OUTPUT: named after the input" "--input inputs/input2.txt --output outputs/output2 " run INPUT=input2
dry_run "random latents without INPUT" "--random 64 --seed 1 --output outputs/samples" run
dry_run "run_parallel takes the same paths" "--input inputs/input3.txt --output outputs/output3 " run_parallel INPUT=inputs/input3 NGPUS=2
if mk run INPUT=no-such-input > "$work/out" 2>&1; then
  fail "missing INPUT" "make succeeded"
elif grep -q "no input file for INPUT=no-such-input" "$work/out"; then
  pass "missing INPUT: one line, non-zero"
else
  fail "missing INPUT" "$(head -2 "$work/out")"
fi
head -4 inputs/input1.txt | sed '1s/.*/3/' > "$work/three.txt"
if mk run INPUT="$work/three" OUTPUT="$work/made" ARGS="--device cpu --quiet" > "$work/out" 2>&1 &&
   [ -s "$work/made.txt" ] && [ -s "$work/made.bmp" ]; then
  pass "make run with an absolute INPUT without .txt and an absolute OUTPUT"
else
  fail "make run, absolute paths" "$(tail -2 "$work/out")"
fi

echo "make install:"
stage=$work/stage
prefix=/opt/facegen-test
if ! mk install PREFIX="$prefix" DESTDIR="$stage" > "$work/out" 2>&1; then
  fail "make install" "$(tail -3 "$work/out")"
else
  root=$stage$prefix
  missing=
  for f in bin/facegen bin/facegen-run-parallel bin/facegen-export-model bin/facegen-make-latents \
           share/facegen/models/facegen-faces.safetensors \
           share/facegen/models/facegen-fashion.bin \
           share/facegen/slurm/facegen-one-node.sbatch; do
    [ -e "$root/$f" ] || missing="$missing $f"
  done
  [ -z "$missing" ] && pass "make install PREFIX DESTDIR: program, launcher, model, sbatch scripts" ||
    fail "make install" "missing:$missing"
  if grep -q "$prefix/bin/facegen-run-parallel" "$root/share/facegen/slurm/facegen-one-node.sbatch" &&
     ! grep -q '\./run_parallel\.sh' "$root"/share/facegen/slurm/*.sbatch; then
    pass "installed sbatch scripts call PREFIX/bin/facegen-run-parallel"
  else
    fail "installed sbatch scripts" "$(grep -n run_parallel "$root"/share/facegen/slurm/*.sbatch | head -3)"
  fi
  # The installed program is run from elsewhere, with no --model: it must find share/facegen/models/.
  if (cd "$work" && "$root/bin/facegen" --random 3 --seed 5 --device cpu --output "$work/installed") \
       > "$work/out" 2>&1 && grep -q "^model .*$root/share/facegen/models/facegen-faces.safetensors" "$work/out"; then
    "$prog" --model models/facegen-faces.safetensors --random 3 --seed 5 --device cpu --quiet --output "$work/tree"
    cmp -s "$work/installed.txt" "$work/tree.txt" && cmp -s "$work/installed.bmp" "$work/tree.bmp" &&
      pass "installed facegen finds its model, same files as the build tree's" ||
      fail "installed facegen" "its files differ from the build tree's"
  else
    fail "installed facegen" "$(grep -m2 -e model -e error "$work/out")"
  fi
  if ! command -v mpirun > /dev/null || ! ldd "$prog" | grep -q libmpi; then
    echo "  skip  installed facegen-run-parallel (no MPI here)"
  elif (cd "$work" && timeout 120 "$root/bin/facegen-run-parallel" --random 3 --seed 5 --output "$work/parallel" \
          --ranks-per-node 2 -- --device cpu --all-ranks) > "$work/out" 2>&1 &&
       grep -q "$root/bin/facegen " "$work/out" && cmp -s "$work/parallel.txt" "$work/tree.txt"; then
    pass "installed facegen-run-parallel runs the installed facegen on 2 ranks, same files"
  else
    fail "installed facegen-run-parallel" "$(tail -3 "$work/out")"
  fi
fi
if ./run_parallel.sh --help > "$work/out" 2> "$work/err" && grep -q -- '--ranks-per-node' "$work/out" && [ ! -s "$work/err" ]; then
  pass "run_parallel.sh --help: on stdout, exit 0"
else
  fail "run_parallel.sh --help" "exit status or stream wrong"
fi

suite_end
