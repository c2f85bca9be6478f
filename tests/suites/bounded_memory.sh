#!/usr/bin/env bash
# bounded_memory.sh: peak resident memory does not grow with N, and stays under the bound docs/usage.md states.
#
# Runs the whole program (latent parsing, the output stage, every file writer but the PNG mosaic, whose
# encoder holds one mosaic file at the end) on N and on 10 N images with the synthetic backend (fast: the network
# is not what is measured here; the CPU backend's buffers are fixed-size by construction), with a small
# chunk so that 10 N is a hundred chunks. Peak RSS comes from /usr/bin/time, or the program's own
# summary.
#
# Then N = 10^12, far beyond any input, in every format and mode, under ulimit -v (1.5 GB: what the
# program needs with room, far below one entry per numbered mosaic file) and a timeout: a two-number
# latent file, read as a file and from a pipe, single process and 2 MPI ranks, must end in exit 1
# naming N within seconds; --random 10^12, --interpolate 1000 and --random 20,000,000 with one tile
# per mosaic file (a file per image) must start computing at once and write files in bounded memory
# (peak RSS read from /proc while it runs, then SIGINT: exit 130, nothing left behind).
# Usage: bounded_memory.sh [build-dir]. Exit 0 pass, 1 fail.
# runner: inside background_shell (make test runs it there, with SIGHUP, SIGINT and SIGQUIT ignored)
set -u
. tests/lib/on_exit.sh
build=${1:-build}
prog=$build/facegen
tool=$build/make-latents
work=$(mktemp -d /tmp/facegen-memory.XXXXXX)
on_exit 'rm -rf "$work"'

chunk=64
tiles=16
small=600
large=6000
flags=(--device synthetic --chunk $chunk --mosaic-tiles $tiles --formats txt,npy,bmp,png)

peak_kb() {  # peak_kb N: runs N images, prints the peak RSS in KB
  "$tool" --count "$1" --seed 7 --output "$work/l$1.txt" > /dev/null || return 1
  local line
  line=$("$prog" "${flags[@]}" --input "$work/l$1.txt" --output "$work/r$1" 2>/dev/null | grep '^total ') || return 1
  rm -rf "$work/r$1" "$work/r$1".* "$work/r$1"-*
  # "peak memory 84.3 MB" (decimal units) -> KB
  echo "$line" | sed -E 's/.*peak memory ([0-9.]+) (MB|GB).*/\1 \2/' |
    awk '{ printf "%d\n", ($2 == "GB" ? $1 * 1e6 : $1 * 1e3) }'
}

a=$(peak_kb $small) || { echo "run of $small images failed"; exit 1; }
b=$(peak_kb $large) || { echo "run of $large images failed"; exit 1; }
threads=$(nproc)
# The bound docs/usage.md states, for these settings (no model: the synthetic backend holds none; no
# mosaic-png; txt keeps image order, so 4 buffers): 64 MB + 4 x chunk x (49,152 B of an image + 188,000 B
# of its text at most) + 6 MB per thread.
bound=$(( 64000 + 4 * chunk * (49152 + 188000) / 1000 + 6000 * threads ))
echo "peak memory: $small images ${a} KB, $large images ${b} KB (chunk $chunk, 10x the images: $((large / chunk)) chunks); bound ${bound} KB"
failed=0
if [ "$b" -gt $((a + 8000)) ]; then
  echo "FAIL: peak memory grew by $((b - a)) KB from $small to $large images"
  failed=1
elif [ "$b" -gt "$bound" ]; then
  echo "FAIL: peak memory ${b} KB is above the bound ${bound} KB"
  failed=1
else
  echo "ok: flat in N and under the bound"
fi

# --- N = 10^12 -------------------------------------------------------------------------------------
huge=1000000000000
limit_kb=1500000
printf '%s 0.5 -0.25' $huge > "$work/huge.txt"
mpi=0
model=$build/random-network.bin
if command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi && [ -f "$model" ]; then
  mpi=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI runs as root
fi
ok() { echo "  ok    $1"; }
bad() { echo "  FAIL  $1: $2"; failed=1; }
leftovers() { ls -A "$work" | grep -v -e '^l[0-9]*\.txt$' -e '^huge\.txt$' -e '^err$' -e '^fifo$' || true; }

# short_input NAME SHELL-COMMAND: exit 1 naming N, within 20 s, nothing left behind.
short_input() {
  local name=$1 command=$2 start=$SECONDS status
  (ulimit -v $limit_kb; timeout 60 bash -c "$command") > /dev/null 2> "$work/err"
  status=$?
  local took=$((SECONDS - start)) message
  message=$(grep '^facegen: error' "$work/err" | tail -1)
  if [ $status -ne 1 ]; then
    bad "$name" "exit status $status after $took s, expected 1: $(tail -c 300 "$work/err")"
  elif ! grep -q -e 'N = 1,000,000,000,000' -e 'more than the file system allows' <<< "$message"; then
    bad "$name" "the message names neither N nor the file system's limit: $message"
  elif [ $took -gt 20 ]; then
    bad "$name" "took $took s"
  elif [ -n "$(leftovers)" ]; then
    bad "$name" "left $(leftovers | head -3)"
  else
    ok "$name: exit 1 in $took s: ${message:0:110}"
  fi
}
run="$prog --device synthetic --quiet --output $work/h"
for format in txt bmp npy png mosaic-png; do
  short_input "N = 10^12, two numbers, a file, --formats $format" "$run --formats $format --input $work/huge.txt"
  short_input "N = 10^12, two numbers, a pipe, --formats $format" \
    "printf '$huge 0.5 -0.25' | $run --formats $format --input /dev/stdin"
done
if [ $mpi = 1 ]; then
  mpi_run="mpirun -np 2 --oversubscribe --bind-to none $run --formats txt,bmp,npy,png,mosaic-png"
  short_input "N = 10^12, two numbers, a file, 2 MPI ranks, every format" "$mpi_run --input $work/huge.txt"
  mkfifo "$work/fifo"
  short_input "N = 10^12, two numbers, a named pipe, 2 MPI ranks, every format" \
    "printf '$huge 0.5 -0.25' > $work/fifo & $mpi_run --input $work/fifo"
  rm -f "$work/fifo"
else
  echo "  (MPI cases skipped: no mpirun, $prog built without MPI, or no $model)"
fi

# drawn NAME PATTERN ARGS...: the program (or mpirun) under ulimit -v; once a file matching PATTERN
# exists (it computes and writes), the peak RSS of every facegen process, then SIGINT: exit 130,
# nothing left, peak under the bound of a chunk of 16 images.
drawn_bound=$(( 64000 + 2 * 16 * 49152 / 1000 + 2 * 16 * 400 / 1000 + 6000 * threads ))
drawn() {
  local name=$1 pattern=$2
  shift 2
  # Default signal dispositions: a shell started in the background hands its children SIGINT ignored,
  # which the program rightly keeps, and the SIGINT below would then never end the run.
  (ulimit -v $limit_kb; exec env --default-signal "$@" > /dev/null 2> "$work/err") &
  local pid=$! waited=0 peak=0 status
  until compgen -G "$work/$pattern" > /dev/null || ! kill -0 $pid 2> /dev/null || [ $waited -ge 600 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  for p in $(pgrep -f "facegen.*--output $work/d" || true); do
    local hwm
    hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$p/status" 2> /dev/null || echo 0)
    [ "${hwm:-0}" -gt $peak ] && peak=$hwm
  done
  kill -INT $pid 2> /dev/null
  local deadline=$((SECONDS + 30))
  while kill -0 $pid 2> /dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  kill -0 $pid 2> /dev/null && { pkill -KILL -P $pid; kill -KILL $pid; } 2> /dev/null  # a run that ignored SIGINT: fail, never hang
  wait $pid
  status=$?
  if [ $status -ne 130 ]; then
    bad "$name" "exit status $status, expected 130 (SIGINT) once it wrote files: $(tail -c 300 "$work/err")"
  elif [ $peak -eq 0 ] || [ $peak -gt $drawn_bound ]; then
    bad "$name" "peak memory $peak KB, bound $drawn_bound KB"
  elif [ -n "$(leftovers)" ]; then
    bad "$name" "left $(leftovers | head -3)"
  else
    ok "$name: computing and writing after $((waited / 10)).$((waited % 10)) s, peak memory $peak KB (bound $drawn_bound KB)"
  fi
  rm -rf "$work"/d*
}
small_chunk=(--device synthetic --chunk 16 --mosaic-tiles 1 --output "$work/d")
drawn "--random 10^12, a file per image, bmp,mosaic-png,txt,png" 'd-0003.bmp.tmp-*' \
  "$prog" --random $huge "${small_chunk[@]}" --formats bmp,mosaic-png,txt,png
drawn "--interpolate 1000 (10^6 images), a file per image, bmp" 'd-0003.bmp.tmp-*' \
  "$prog" --interpolate 1000 "${small_chunk[@]}" --formats bmp
drawn "--random 20,000,000, a file per image, bmp" 'd-0003.bmp.tmp-*' \
  "$prog" --random 20000000 "${small_chunk[@]}" --formats bmp
if [ $mpi = 1 ]; then
  drawn "--random 10^12 on 2 MPI ranks (run_parallel.sh), a file per image, bmp,mosaic-png" 'd-0003.bmp.tmp-*' \
    "$(dirname "$0")/../../run_parallel.sh" --program "$prog" --ranks-per-node 2 --random $huge \
    --output "$work/d" -- "${small_chunk[@]:0:6}" --formats bmp,mosaic-png
fi
exit $failed
