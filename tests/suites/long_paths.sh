#!/usr/bin/env bash
# long_paths.sh: output paths from 200 bytes to PATH_MAX, one process and 2 MPI ranks.
#
# For each length L the output prefix is a path of exactly L bytes (folders of 200-byte names, then a
# last name of up to 240 bytes). Where PREFIX.txt fits PATH_MAX (4,095 bytes here) the run writes every
# format, and 2 MPI ranks (run_parallel.sh) write the same bytes: no abort (OpenMPI 4.1's shared-file-
# pointer components overflowed a fixed buffer on names of about 200 bytes, "buffer overflow detected"),
# no file but the outputs. Where it does not, both refuse it in one sentence naming the limit, exit 1,
# nothing created. Usage: long_paths.sh [build-dir]; exit 0 pass, 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh long_paths
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] || { echo "long_paths: $prog is missing (run make)"; exit 1; }
work=$(mktemp -d /tmp/facegen-paths.XXXXXX)
on_exit 'rm -rf "$work"'
mpi=0
if command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi && [ -f "$model" ]; then
  mpi=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI runs as root
else
  echo "long_paths: MPI cases skipped (no mpirun, $prog built without MPI, or no $model)"
fi
path_max=$(( $(getconf PATH_MAX "$work") - 1 ))
formats=txt,bmp,npy,png,mosaic-png

# prefix_of_length L: makes the folders of a prefix of exactly L bytes under $work/L and prints it.
prefix_of_length() {
  local want=$1 p=$work/$1
  mkdir -p "$p"
  while [ $((want - ${#p})) -gt 241 ]; do
    p=$p/$(printf '%0200d' 0 | tr 0 d)
    mkdir "$p" || return 1
  done
  echo "$p/$(printf "%0$((want - ${#p} - 1))d" 0 | tr 0 n)"
}

# The files under a folder, with sizes, names shortened (the comparison is by content).
listing() { (cd "$1" && find . -type f -printf '%P %s\n' | sed -E 's/[dn]{20,}/~/g' | sort); }

commas() { sed ':a;s/\B[0-9]\{3\}\>/,&/;ta' <<< "$1"; }
# Lengths on both sides of the limit: PREFIX/000000.png (png) is the longest output path, 11 bytes more.
# MPI runs (seconds each) at a few of them.
mpi_lengths=" 200 256 4000 $((path_max - 11)) $((path_max - 10)) "
for length in 200 230 256 300 1024 4000 $((path_max - 11)) $((path_max - 10)) $path_max; do
  prefix=$(prefix_of_length $length) || { fail "L=$length" "cannot make its folders"; continue; }
  dir=$(dirname "$prefix")
  # One process.
  deadline 60 "$prog" --device synthetic --random 5 --formats $formats --output "$prefix" --quiet > /dev/null 2> "$work/err"
  status=$?
  [[ $mpi_lengths == *" $length "* ]] || mpi_here=0
  [[ $mpi_lengths == *" $length "* ]] && mpi_here=$mpi
  if [ $((length + 11)) -le $path_max ]; then
    if [ $status -ne 0 ]; then
      fail "L=$length, one process" "exit status $status: $(head -c 300 "$work/err")"
      continue
    fi
    expected=$(listing "$dir")
    if [ "$(ls -A "$dir" | wc -l)" -ne 5 ]; then
      fail "L=$length, one process" "not the 5 outputs: $(ls -A "$dir" | sed -E 's/[dn]{20,}/~/g' | tr '\n' ' ')"
      continue
    fi
    pass "L=$length, one process: $formats written"
    [ $mpi_here = 1 ] || { rm -rf "${dir:?}"/*; continue; }
    mkdir "$work/reference" && mv "$dir"/* "$work/reference/"
    deadline 120 ./run_parallel.sh --program "$prog" --ranks-per-node 2 --random 5 --output "$prefix" \
      -- --device synthetic --all-ranks --formats $formats --quiet > /dev/null 2> "$work/err"
    status=$?
    if [ $status -ne 0 ]; then
      fail "L=$length, 2 MPI ranks" "exit status $status: $(grep -v '^  ' "$work/err" | head -c 300)"
    elif [ "$(listing "$dir")" != "$expected" ] || ! diff -r "$dir" "$work/reference" > /dev/null; then
      fail "L=$length, 2 MPI ranks" "not the single process's files: $(diff <(echo "$expected") <(listing "$dir") | head -3)"
    else
      pass "L=$length, 2 MPI ranks: the single process's bytes, nothing else"
    fi
    rm -rf "$work/reference" "${dir:?}"/*
  else
    message=$(cat "$work/err")
    if [ $status -ne 1 ] || [ "$(wc -l <<< "$message")" -ne 1 ] ||
       ! grep -q "is a path of $(commas $length) bytes, too long for its outputs (path + \"/000000.png\"): the limit is $(commas $path_max) bytes" <<< "$message"; then
      fail "L=$length, one process" "expected exit 1 and one line naming the limit, got $status: ${message:0:200}"
    elif [ -n "$(ls -A "$dir")" ]; then
      fail "L=$length, one process" "files were left"
    else
      pass "L=$length, one process: refused: ${message:0:60}...${message: -80}"
    fi
    [ $mpi_here = 1 ] || continue
    deadline 120 ./run_parallel.sh --program "$prog" --ranks-per-node 2 --random 5 --output "$prefix" \
      -- --device synthetic --formats $formats --quiet > /dev/null 2> "$work/err"
    status=$?
    if [ $status -ne 1 ] || ! grep -q "too long for its outputs.*the limit is" "$work/err" || [ -n "$(ls -A "$dir")" ]; then
      fail "L=$length, 2 MPI ranks" "expected exit 1 naming the limit, nothing left; got $status: $(head -c 300 "$work/err")"
    else
      pass "L=$length, 2 MPI ranks: refused the same way"
    fi
  fi
done

suite_end --bare
