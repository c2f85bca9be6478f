#!/usr/bin/env bash
# bench_files_gpu.sh: end-to-end images/s, latents to finished files, for each output format on the GPU.
#
# Makes N random latents (default 100,000) once, then runs build/facegen on the GPU with one format at
# a time (and the default txt,bmp), and prints one table row per format from the program's summary:
# total seconds and images/s from start to the last rename, with generate and write times beside.
# Outputs go to a scratch directory on the same disk as DIR (default build/bench-files) and are deleted
# after each run. FORMATS="txt npy" picks the runs. Usage: bench/bench_files_gpu.sh [N] [DIR] [extra facegen flags...]
set -eu
cd "$(dirname "$0")/.."
n=${1:-100000}
dir=${2:-build/bench-files}
shift $(( $# > 2 ? 2 : $# ))
prog=build/facegen
model=${MODEL:-build/random-network.bin}
mkdir -p "$dir"
[ -x "$prog" ] && [ -f "$model" ] || make "$prog" "$model"
latents=$dir/latents-$n.txt
[ -f "$latents" ] || build/make-latents --count "$n" --seed 1 --output "$latents" > /dev/null
echo "facegen end to end, $n images, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1), $(date -u +%F), commit ${FACEGEN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
printf '| %-12s | %10s | %12s | %10s | %10s | %10s | %12s |\n' formats "total s" "images/s" "parse s" "generate s" "write s" "written"
for formats in ${FORMATS:-txt bmp npy png mosaic-png txt,bmp}; do
  out=$(mktemp -d "$dir/run.XXXXXX")
  summary=$("$prog" --device cuda --model "$model" --input "$latents" --output "$out/r" --formats "$formats" "$@" 2>/dev/null)
  total=$(echo "$summary" | sed -nE 's/^total +([0-9.]+) s \(([0-9]+) images\/s.*/\1 \2/p')
  parse=$(echo "$summary" | sed -nE 's/^parse +([0-9.]+) s.*/\1/p')
  gen=$(echo "$summary" | sed -nE 's/^generate +([0-9.]+) s.*/\1/p')
  write=$(echo "$summary" | sed -nE 's/^write +([0-9.]+) s.*/\1/p')
  bytes=$(du -sh "$out" | cut -f1)
  printf '| %-12s | %10s | %12s | %10s | %10s | %10s | %12s |\n' "$formats" ${total% *} ${total#* } "$parse" "$gen" "$write" "$bytes"
  rm -rf "$out"
done
