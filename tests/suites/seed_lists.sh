#!/usr/bin/env bash
# seed_lists.sh: --seeds LIST end to end: image k is the image of its seed alone, the image that
# --random 1 --seed S makes, byte for byte (txt, and the .npy's data), in one process and over 2 and 3
# MPI ranks (every rank drawing its own share) with other --chunk, --images-per-round and --threads
# values; a repeated seed repeats its image; the summary names the seeds and its JSON lists them as
# ranges. Every child starts with every signal at its default and has a deadline.
# Usage: tests/suites/seed_lists.sh [build-dir]; exit 0 pass, 1 fail (MPI cases skipped, saying why,
# where mpirun or an MPI build is missing).
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh seed_lists
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "seed_lists: $prog or $model is missing (run make)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FACEGEN_TEST_FAULT

work=$(mktemp -d /tmp/facegen-seeds.XXXXXX)
on_exit 'rm -rf "$work"'

# facegen ARGS...: the program on the CPU with the test network, 60 s at most.
facegen() { deadline 60 "$prog" --device cpu --model "$model" --formats txt,npy --quiet "$@"; }

# parallel RANKS PREFIX SEEDS [facegen flags]: run_parallel.sh on this machine, every rank generating
# (npy shards of 2 images: the job splits at shards, so each rank draws its own images), 120 s at most.
parallel() {
  local ranks=$1 prefix=$2 seeds=$3
  shift 3
  deadline 120 ./run_parallel.sh --program "$prog" --model "$model" --seeds "$seeds" \
    --output "$prefix" --ranks-per-node "$ranks" -- --device cpu --formats npy --shard-images 2 --all-ranks "$@" \
    > "$work/stdout" 2> "$work/stderr"
}

# same_shards_as NAME PREFIX REFERENCE: the data of PREFIX-000000.npy, PREFIX-000001.npy, ... in order
# equals the reference's .npy data (each shard's 128-byte header left out).
same_shards_as() {
  local shard
  if cmp -s <(for shard in "$2"-*.npy; do tail -c +129 "$shard"; done) "$3.npy.data"; then
    pass "$1"
  else
    fail "$1" "the shards' images differ from images 0 of --random 1 --seed S"
  fi
}

# reference PREFIX SEED...: PREFIX.txt and PREFIX.npy.data as the images 0 of --random 1 --seed S, one
# run per seed, put together in the order given.
reference() {
  local prefix=$1 seed k=0
  shift
  echo "$#" > "$prefix.txt"
  : > "$prefix.npy.data"
  for seed in "$@"; do
    facegen --random 1 --seed "$seed" --output "$work/one$k" || { echo "--random 1 --seed $seed failed"; return 1; }
    tail -n +2 "$work/one$k.txt" >> "$prefix.txt"
    tail -c +129 "$work/one$k.npy" >> "$prefix.npy.data"  # after the 128-byte .npy header
    k=$((k + 1))
  done
}

# same_as NAME PREFIX REFERENCE: PREFIX.txt and the data of PREFIX.npy equal the reference's bytes.
same_as() {
  if ! cmp -s "$2.txt" "$3.txt"; then
    fail "$1" "$2.txt differs from images 0 of --random 1 --seed S ($(cmp "$2.txt" "$3.txt" 2>&1 | head -1))"
  elif ! cmp -s <(tail -c +129 "$2.npy") "$3.npy.data"; then
    fail "$1" "$2.npy differs from images 0 of --random 1 --seed S"
  else
    pass "$1"
  fi
}

echo "facegen --seeds:"
# --- one process -----------------------------------------------------------------------------------
if ! reference "$work/ref35" 3 5; then
  fail "--seeds 3,5 reference" "a --random run failed"
elif facegen --seeds 3,5 --output "$work/s35"; then
  same_as "--seeds 3,5: images 0 of --random 1 --seed 3 and --seed 5, byte for byte" "$work/s35" "$work/ref35"
else
  fail "--seeds 3,5" "exit status $?"
fi
# Odd ranges, both ends of uint64, a repeated seed; read in chunks that cut the ranges.
list=3,5,0-6,18446744073709551614-18446744073709551615,5
seeds=(3 5 0 1 2 3 4 5 6 18446744073709551614 18446744073709551615 5)
if ! reference "$work/ref" "${seeds[@]}"; then
  fail "--seeds $list reference" "a --random run failed"
else
  for flags in "--chunk 1 --threads 1" "--chunk 5 --threads 2" "--chunk 1024 --threads 3"; do
    # shellcheck disable=SC2086
    if facegen --seeds "$list" $flags --output "$work/one" --summary-json "$work/one.json" > /dev/null; then
      same_as "--seeds $list $flags: each image its seed's alone" "$work/one" "$work/ref"
    else
      fail "--seeds $list $flags" "exit status $?"
    fi
  done
fi

# --- png names each image by its seed, as StyleGAN's gen_images.py (seed0042.png) ---------------------
# same_pngs_as NAME FOLDER SEED...: FOLDER holds exactly seedNNNN.png of these seeds, each the PNG of
# --random 1 --seed S (its 000000.png).
same_pngs_as() {
  local name=$1 folder=$2 seed want=() wrong=
  shift 2
  for seed in "$@"; do
    want+=("$(printf 'seed%04d.png' "$seed")")
    [ -d "$work/one-png-$seed" ] || deadline 60 "$prog" --device cpu --model "$model" --quiet --random 1 --seed "$seed" \
      --formats png --output "$work/one-png-$seed" || { wrong="--random 1 --seed $seed failed"; break; }
    cmp -s "$folder/$(printf 'seed%04d.png' "$seed")" "$work/one-png-$seed/000000.png" || wrong="$wrong $seed"
  done
  if [ -z "$wrong" ] && [ "$(ls "$folder" | sort | tr '\n' ' ')" = "$(printf '%s\n' "${want[@]}" | sort | tr '\n' ' ')" ]; then
    pass "$name"
  else
    fail "$name" "files: $(ls "$folder" | head -c 200); differing: $wrong"
  fi
}
if deadline 60 "$prog" --device cpu --model "$model" --quiet --seeds 0-7,42,10000 --formats png --output "$work/named"; then
  same_pngs_as "--seeds 0-7,42,10000 --formats png: seed0000.png ... seed0007.png, seed0042.png, seed10000.png, each its seed's image" \
    "$work/named" 0 1 2 3 4 5 6 7 42 10000
else
  fail "--seeds into png" "exit status $?"
fi

# --- the summary: the seeds by name, and as ranges in the JSON ---------------------------------------
deadline 60 "$prog" --device cpu --model "$model" --formats npy --seeds 0-99,500,1000-1009 \
  --output "$work/sum" --summary-json "$work/sum.json" > "$work/stdout" 2> "$work/stderr"
if grep -qx "input     N(0, 1) latents of seeds 0-99,500,1000-1009: 111 images" "$work/stdout" &&
   /usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["seeds"] == [[0, 99], [500, 500], [1000, 1009]], s["seeds"]
assert s["images"] == 111 and s["latents"] == "N(0, 1) latents of seeds 0-99,500,1000-1009", s
' "$work/sum.json" 2> "$work/err"; then
  pass "summary: the input line names the seeds; the JSON lists them as [first, last] ranges"
else
  fail "summary" "$(grep '^input' "$work/stdout") $(cat "$work/stderr" "$work/err")"
fi
facegen --random 2 --seed 9 --output "$work/rand" --summary-json "$work/rand.json" > /dev/null
if /usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert "seeds" not in s and s["latents"] == "2 random latents, N(0, 1), seed 9", s
' "$work/rand.json" 2> "$work/err"; then
  pass "--random N --seed S: the JSON as before, seed and count in \"latents\", no \"seeds\""
else
  fail "--random summary" "$(cat "$work/err")"
fi
deadline 10 "$prog" --help > "$work/help"
if grep -qE -- '-S, --seeds LIST +instead of --input' "$work/help"; then
  pass "--help lists -S, --seeds LIST"
else
  fail "--help" "no --seeds line"
fi

# --- MPI ranks, every rank drawing its own images --------------------------------------------------
if ! command -v mpirun > /dev/null; then
  skip "MPI ranks: mpirun is not installed"
elif ! ldd "$prog" | grep -q libmpi; then
  skip "MPI ranks: $prog was built without MPI"
else
  for case in "2|--images-per-round 1 --threads 1" "2|--chunk 5 --threads 2" "3|--images-per-round 2 --threads 3" "3|--chunk 7"; do
    ranks=${case%%|*} flags=${case#*|}
    name="$ranks ranks, --seeds $list $flags: each image its seed's alone"
    # shellcheck disable=SC2086
    if parallel "$ranks" "$work/p$ranks" "$list" $flags --summary-json "$work/p$ranks.json"; then
      same_shards_as "$name" "$work/p$ranks" "$work/ref"
    else
      fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
    fi
  done
  if grep -qx "input     N(0, 1) latents of seeds $list: 12 images" "$work/stdout" &&
     /usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
top = 18446744073709551615
assert s["seeds"] == [[3, 3], [5, 5], [0, 6], [top - 1, top], [5, 5]], s["seeds"]
assert s["ranks"] == 3 and s["generating_ranks"] == 3, s
' "$work/p3.json" 2> "$work/err"; then
    pass "3 ranks: rank 0's summary names the seeds and its JSON lists them as ranges"
  else
    fail "MPI summary" "$(grep '^input' "$work/stdout") $(cat "$work/err")"
  fi
  if deadline 120 ./run_parallel.sh --program "$prog" --model "$model" --seeds 9,0-4,42 --output "$work/pnamed" \
       --ranks-per-node 2 -- --device cpu --formats png --all-ranks --quiet > /dev/null 2> "$work/stderr"; then
    same_pngs_as "2 ranks, --seeds 9,0-4,42 --formats png: each rank's PNGs named by seed" "$work/pnamed" 9 0 1 2 3 4 42
  else
    fail "2 ranks, --seeds into png" "$(head -c 300 "$work/stderr")"
  fi
  if parallel 2 "$work/bad" 5-3; then
    fail "2 ranks, --seeds 5-3" "exit status 0"
  elif [ "$(grep -c "descending range" "$work/stderr")" -eq 1 ] && [ ! -e "$work/bad.txt" ]; then
    pass "2 ranks, --seeds 5-3: one line, no output"
  else
    fail "2 ranks, --seeds 5-3" "$(head -c 400 "$work/stderr")"
  fi
fi

suite_end
