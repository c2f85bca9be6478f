#!/usr/bin/env bash
# soak.sh: one long run with its resident memory sampled over time; memory must stay flat.
#
#   tests/soak.sh [--images N] [--device cpu|cuda|auto] [--formats npy] [--dir DIR] [--build build]
#
# Runs build/facegen on N seeded random latents (--random N, no latent file), samples VmRSS every
# 2 s, and passes when the run succeeds, the output holds N images, and after the first fifth of the
# run (model, buffers and the page cache of the first writes settle) RSS varies by no more than
# max(16 MiB, 5 %). The samples go to DIR/rss.log (seconds, images written so far, RSS in KiB).
#
# Sizes: the default npy output is 49,152 bytes per image (1,000,000 images: 49 GB; text would be
# 92 GB, and a BMP mosaic of that many is refused). Here (CPU backend, 2 cores) --images 20000 takes a
# few minutes; the 1,000,000-image soak belongs on a GPU machine:
#   tests/soak.sh --images 1000000 --device cuda --dir /path/with/60GB
set -u
cd "$(dirname "$0")/.."
images=20000
device=cpu
formats=npy
dir=
build=build
while [ $# -gt 0 ]; do
  case $1 in
    --images) images=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --formats) formats=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "soak: unknown argument $1"; exit 2 ;;
  esac
done
[ -n "$dir" ] || dir=$(mktemp -d /tmp/facegen-soak.XXXXXX)
mkdir -p "$dir"
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "soak: build first (make all $model)"; exit 1; }

echo "soak: $images images, --device $device, --formats $formats, in $dir"
start=$SECONDS
"$prog" --device "$device" --formats "$formats" --model "$model" --random "$images" --seed 11 \
  --output "$dir/soak" > "$dir/stdout" 2> "$dir/stderr" &
pid=$!
: > "$dir/rss.log"
first_ext=${formats%%,*}
while kill -0 $pid 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' /proc/$pid/status 2>/dev/null)
  [ -n "$rss" ] || break
  bytes=$(stat -c %s "$dir"/soak."$first_ext".tmp-* 2>/dev/null | head -n1)
  done_images=$([ "$first_ext" = npy ] && [ -n "$bytes" ] && echo $(((bytes - 128) / 49152)) || echo "?")
  echo "$((SECONDS - start)) $done_images $rss" >> "$dir/rss.log"
  sleep 2
done
wait $pid
status=$?
seconds=$((SECONDS - start))
[ $status -eq 0 ] || { echo "soak: FAIL: exit status $status: $(cat "$dir/stderr")"; exit 1; }

if [ "$first_ext" = npy ]; then
  want=$((128 + images * 49152))
  got=$(stat -c %s "$dir/soak.npy")
  [ "$got" = "$want" ] || { echo "soak: FAIL: soak.npy has $got bytes, expected $want"; exit 1; }
fi
samples=$(wc -l < "$dir/rss.log")
[ "$samples" -ge 5 ] || { echo "soak: FAIL: only $samples RSS samples (run too short to judge)"; exit 1; }
awk -v skip=$((samples / 5)) '
  NR > skip { if (min == "" || $3 < min) min = $3; if ($3 > max) max = $3 }
  { last = $3 } NR == 1 { first = $3 }
  END {
    spread = max - min; limit = 16384; if (max * 0.05 > limit) limit = max * 0.05
    printf "soak: RSS first %.1f MiB, after warm-up %.1f..%.1f MiB (spread %.1f MiB, limit %.1f MiB), last %.1f MiB\n",
           first / 1024, min / 1024, max / 1024, spread / 1024, limit / 1024, last / 1024
    exit spread <= limit ? 0 : 1
  }' "$dir/rss.log"
flat=$?
echo "soak: $images images in $seconds s ($(grep -E '^generate' "$dir/stdout"))"
echo "soak: samples in $dir/rss.log"
if [ $flat -ne 0 ]; then echo "soak: FAIL: memory grew during the run"; exit 1; fi
echo "soak: passed"
