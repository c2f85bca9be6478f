#!/usr/bin/env bash
# bounded_memory.sh: peak resident memory does not grow with N, and stays under the README's bound.
#
# Runs the whole program (latent parsing, the output stage, every file writer but the PNG mosaic, whose
# encoder holds one mosaic file at the end) on N and on 10 N images with the synthetic backend (fast: the network
# is not what is measured here; the CPU backend's buffers are fixed-size by construction), with a small
# chunk so that 10 N is a hundred chunks. Peak RSS comes from /usr/bin/time, or the program's own
# summary. Usage: bounded_memory.sh [build-dir]. Exit 0 pass, 1 fail.
set -u
build=${1:-build}
prog=$build/facegen
tool=$build/make-latents
work=$(mktemp -d /tmp/facegen-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT

chunk=64
tiles=16
small=600
large=6000
flags=(--device synthetic --chunk $chunk --batch $chunk --mosaic-tiles $tiles --formats txt,npy,bmp,png)

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
# The README's bound, for these settings (no model: the synthetic backend holds none; no mosaic-png):
# 64 MB + 2 x chunk x 49,152 B + 2 MB per writer thread.
bound=$(( 64000 + 2 * chunk * 49152 / 1000 + 2000 * threads ))
echo "peak memory: $small images ${a} KB, $large images ${b} KB (chunk $chunk, 10x the images: $((large / chunk)) chunks); bound ${bound} KB"
if [ "$b" -gt $((a + 8000)) ]; then
  echo "FAIL: peak memory grew by $((b - a)) KB from $small to $large images"
  exit 1
fi
if [ "$b" -gt "$bound" ]; then
  echo "FAIL: peak memory ${b} KB is above the bound ${bound} KB"
  exit 1
fi
echo "ok: flat in N and under the bound"
