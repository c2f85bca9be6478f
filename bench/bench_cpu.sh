#!/usr/bin/env bash
# bench_cpu.sh: `make bench-cpu`. ROUNDS interleaved rounds of facegen's CPU backend
# (build/facegen-bench-cpu: checked against the reference layers, then timed) and PyTorch's CPU
# forms (bench/cpu_pytorch.py: checked against float64, then timed), on the same random network and
# all the CPUs this process is given; then the best of each across rounds, and the load before and
# after, since other work on the machine lowers every figure. Any failed check stops it, non-zero.
# Usage: bench_cpu.sh BENCH-BINARY [ROUNDS]
set -eu -o pipefail
cd "$(dirname "$0")/.."
bench=$1
rounds=${2:-3}
build=$(dirname "$bench")
model=$build/random-network.bin
[ -f "$model" ] || "$build/make-random-network" --seed 1 --output "$model" > /dev/null
log=$(mktemp /tmp/facegen-bench-cpu.XXXXXX)
trap 'rm -f "$log"' EXIT
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
     "$(grep -m 1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs"
echo "load before: $(uptime | sed 's/.*load average: //')"
for round in $(seq "$rounds"); do
  echo "--- round $round"
  "$bench" --images 512 --rounds 2 | tee -a "$log"
  /usr/bin/python3 bench/cpu_pytorch.py --model "$model" --rounds 2 | tee -a "$log"
done
echo "load after: $(uptime | sed 's/.*load average: //')"
echo "--- best of $rounds rounds: images/s, GFLOP/s, and images per CPU-second (all threads' CPU time)"
best() {  # best LABEL-REGEX FIELD-OF-IMAGES/S FIELD-OF-GFLOP/S FIELD-OF-PER-CPU-SECOND NAME
  grep -E "$1" "$log" | awk -v i="$2" -v g="$3" -v c="$4" -v name="$5" \
    '{ if ($i + 0 > b) { b = $i + 0; f = $g + 0 } if ($c + 0 > pc) pc = $c + 0 }
     END { printf "%-44s %8.1f %8.1f %8.1f\n", name, b, f, pc }'
}
threads=$(grep -m 1 '^backend' "$log" | sed -E 's/.*, ([0-9]+) threads?$/\1/')
best '^facegen 1 thread:' 4 6 8 "facegen, 1 thread"
best "^facegen $threads threads:" 4 6 8 "facegen, $threads threads"
best "^dcgan-k4 $threads threads:" 4 6 8 "facegen, DCGAN tutorial network (k 4), $threads threads"
best '^RESULT eager ' 3 4 5 "PyTorch eager ConvTranspose2d"
best '^RESULT pixelshuffle ' 3 4 5 "PyTorch 3x3 Conv2d + pixel_shuffle, frozen"
best '^RESULT onednn-conv ' 3 4 5 "oneDNN 3x3 convolutions alone (own FLOPs)"
# The layers alone, 16 images each: their CPU times per image added, for both networks.
grep -E '^[a-z0-9-]+ all ' "$log" | awk '{ if ($3 + 0 > b[$1]) b[$1] = $3 + 0 }
  END { for (k in b) printf "layers alone (%s lines) %30s %8.1f images per CPU-second\n", k, "", b[k] }' | sort
# FMA ceilings: GFLOP/s, and GFLOP per CPU-second (the per-core peak while it runs).
grep -E '^FMA ceiling' "$log" | awk '{ k = $3 " " $4 " " $5; if ($6 + 0 > b[k]) b[k] = $6 + 0; if ($13 + 0 > c[k]) c[k] = $13 + 0 }
  END { for (k in b) printf "FMA ceiling %-32s %8s %8.1f GFLOP/s, %.1f GFLOP per CPU-second per thread\n", k, "", b[k], c[k] }' | sort
