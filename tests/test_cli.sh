#!/usr/bin/env bash
# test_cli.sh: the facegen program end to end, as a user runs it: good runs and every bad input.
#
# Each case checks the exit status, that stderr says the expected thing, and that no output file (nor
# any temporary file) is left behind; an existing output of the same name must survive a failed run
# untouched. Usage: tests/test_cli.sh [build-dir]. Prints one line per case and "N passed, N failed".
set -u
. "$(dirname "$0")/lib/suite.sh" test_cli
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] || { echo "test_cli: $prog is missing (run make)"; exit 1; }
[ -f "$model" ] || { echo "test_cli: $model is missing (run make $model)"; exit 1; }

work=$(mktemp -d /tmp/facegen-cli.XXXXXX)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$work"
}
on_exit cleanup

# expect_error NAME STATUS MESSAGE-PATTERN PROGRAM-ARGS...: the run must fail with STATUS, print a
# line matching MESSAGE-PATTERN (grep -E), and leave nothing named $work/out/result* behind.
expect_error() {
  local name=$1 status=$2 pattern=$3
  shift 3
  rm -rf "$work/out" && mkdir -p "$work/out"
  earlier_output txt "old contents" > "$work/out/result.txt"
  "$prog" "$@" > "$work/stdout" 2> "$work/stderr"
  local got=$?
  local left
  left=$(ls "$work/out" | grep -v '^result.txt$')
  if [ "$got" -ne "$status" ]; then
    fail "$name" "exit status $got, expected $status; stderr: $(head -c 300 "$work/stderr")"
  elif ! grep -qE -- "$pattern" "$work/stderr"; then
    fail "$name" "stderr does not match '$pattern': $(head -c 300 "$work/stderr")"
  elif [ "$(wc -l < "$work/stderr")" -ne 1 ]; then
    fail "$name" "expected exactly one line on stderr, got: $(cat "$work/stderr")"
  elif [ -n "$left" ]; then
    fail "$name" "left files behind: $left"
  elif ! cmp -s "$work/out/result.txt" <(earlier_output txt "old contents"); then
    fail "$name" "the existing output was changed"
  else
    pass "$name: $(cat "$work/stderr")"
  fi
}

latents() {  # latents FILE N [values-per-image-count]: N images of seeded values
  /usr/bin/python3 - "$@" <<'PY'
import random, sys
path, n = sys.argv[1], int(sys.argv[2])
total = int(sys.argv[3]) if len(sys.argv) > 3 else n * 100
rng = random.Random(n * 7919 + total)
with open(path, "w") as f:
    f.write(f"{n}\n")
    f.write(" ".join(f"{rng.gauss(0, 1):.6f}" for _ in range(total)))
    f.write("\n")
PY
}

run_ok() { "$prog" --device cpu --model "$model" "$@"; }

echo "facegen command line:"
# --- good runs ---------------------------------------------------------------------------------
latents "$work/l3.txt" 3
mkdir -p "$work/good"
if run_ok --input "$work/l3.txt" --output "$work/good/r" > "$work/stdout" 2> "$work/stderr"; then
  lines=$(wc -l < "$work/good/r.txt")
  first=$(head -n1 "$work/good/r.txt")
  values=$(sed -n 2p "$work/good/r.txt" | wc -w)
  bmp_bytes=$(stat -c %s "$work/good/r.bmp")
  # s = 2 tiles of 64: 128 x 128 x 3 bytes of pixels + 54 bytes of headers
  if [ "$lines" = 4 ] && [ "$first" = 3 ] && [ "$values" = 12288 ] && [ "$bmp_bytes" = $((128 * 128 * 3 + 54)) ]; then
    pass "3 images: txt has N and 3 lines of 12288 values, bmp is a 2x2 mosaic"
  else
    fail "3 images" "lines=$lines first=$first values=$values bmp=$bmp_bytes"
  fi
  if grep -q 'wrote .*r.bmp' "$work/stdout" && grep -q 'generate' "$work/stdout"; then
    pass "prints what it read, wrote and how long generation took"
  else
    fail "report" "$(cat "$work/stdout")"
  fi
  if grep -qE '^-?[01]\.[0-9]{4} ' <(sed -n 2p "$work/good/r.txt") &&
     ! sed -n '2,$p' "$work/good/r.txt" | tr ' ' '\n' | grep -vE '^(-?[01]\.[0-9]{4})?$' | grep -q .; then
    pass "every text value is %.4f in [-1, 1]"
  else
    fail "text values" "unexpected token in the text output"
  fi
else
  fail "3 images" "exit status $?: $(cat "$work/stderr")"
fi
if run_ok --input "$work/l3.txt" --output "$work/good/n" --formats npy --quiet > "$work/stdout" 2>&1 &&
   [ "$(stat -c %s "$work/good/n.npy")" = $((128 + 3 * 12288 * 4)) ] && [ ! -s "$work/stdout" ] &&
   [ ! -e "$work/good/n.txt" ]; then
  pass "--formats npy --quiet writes only the .npy and prints nothing"
else
  fail "npy" "$(cat "$work/stdout")"
fi
cp "$work/good/r.txt" "$work/good/first.txt"
if run_ok --threads 1 --input "$work/l3.txt" --output "$work/good/r" > /dev/null 2>&1 &&
   cmp -s "$work/good/r.txt" "$work/good/first.txt"; then
  pass "same bytes with another thread count; the old output was replaced"
else
  fail "thread invariance" "outputs differ between every thread and --threads 1"
fi
# --- the formats and flags of large runs -------------------------------------------------------------
latents "$work/l5.txt" 5
if run_ok --input "$work/l5.txt" --output "$work/good/f" --formats png,mosaic-png,npy > "$work/stdout" 2> "$work/stderr" &&
   [ "$(ls "$work/good/f" | tr '\n' ' ')" = "000000.png 000001.png 000002.png 000003.png 000004.png " ] &&
   [ "$(head -c 8 "$work/good/f.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] && [ ! -e "$work/good/f.bmp" ] &&
   [ -z "$(ls "$work/good" | grep tmp)" ]; then
  pass "--formats png,mosaic-png,npy: a folder of 5 PNGs, a PNG mosaic, no temporary left"
else
  fail "png formats" "$(ls "$work/good" "$work/good/f" 2>&1 | tr '\n' ' ') $(cat "$work/stderr")"
fi
if run_ok --input "$work/l5.txt" --output "$work/good/s" --mosaic-tiles 2 --chunk 2 > "$work/stdout" 2> "$work/stderr" &&
   [ "$(ls "$work/good" | grep '^s-' | tr '\n' ' ')" = "s-0001.bmp s-0002.bmp " ] && [ ! -e "$work/good/s.bmp" ] &&
   [ "$(stat -c %s "$work/good/s-0001.bmp")" = $((128 * 128 * 3 + 54)) ] &&
   [ "$(stat -c %s "$work/good/s-0002.bmp")" = $((64 * 64 * 3 + 54)) ] &&
   grep -q "writing 2 files .*s-0001.bmp \.\.\. .*s-0002.bmp" "$work/stderr"; then
  pass "--mosaic-tiles 2 splits 5 images into s-0001.bmp (2x2) and s-0002.bmp (1x1), and says so"
else
  fail "mosaic split" "$(ls "$work/good") $(cat "$work/stderr")"
fi
if run_ok --input "$work/l5.txt" --output "$work/good/c1" --formats txt --chunk 1 --write-threads 1 > /dev/null 2>&1 &&
   run_ok --input "$work/l5.txt" --output "$work/good/c2" --formats txt --write-threads 3 > /dev/null 2>&1 &&
   cmp -s "$work/good/c1.txt" "$work/good/c2.txt"; then
  pass "same text for --chunk 1 --write-threads 1 and one chunk on 3 writer threads"
else
  fail "chunk invariance" "texts differ"
fi
if run_ok --input "$work/l3.txt" --output "$work/good/q" > "$work/stdout" 2> "$work/stderr" && [ ! -s "$work/stderr" ] &&
   grep -qE '^write .*images/s.*MB/s' "$work/stdout" && grep -qE '^parse ' "$work/stdout" &&
   grep -qE '^total .*peak memory' "$work/stdout"; then
  pass "stderr not a terminal: no progress bar; summary of parse, generate, write, total"
else
  fail "summary" "stderr: $(head -c 200 "$work/stderr" | od -c | head -3) stdout: $(cat "$work/stdout")"
fi
# The progress display on a terminal and in a pipe: tests/suites/progress_summary.sh.

if run_ok --random 3 --seed 5 --output "$work/good/rand" --formats npy --quiet &&
   "$prog" --device cpu --model "$model" --random 3 --seed 5 --threads 1 --chunk 1 --output "$work/good/rand1" --formats npy --quiet &&
   cmp -s "$work/good/rand.npy" "$work/good/rand1.npy" &&
   run_ok --random 3 --seed 6 --output "$work/good/rand6" --formats npy --quiet && ! cmp -s "$work/good/rand.npy" "$work/good/rand6.npy"; then
  pass "--random N --seed S: same seed same images for any thread count and chunk, another seed other images"
else
  fail "--random" "outputs not as expected"
fi
# --truncation: other images than without it; a T past every draw (8.58) the untruncated ones; the
# summary and the JSON summary say it; the tar samples record it beside their seed.
if run_ok --random 3 --seed 5 --truncation 0.5 --output "$work/good/trunc" --formats npy --summary-json "$work/good/trunc.json" \
     > "$work/stdout" 2>&1 && ! cmp -s "$work/good/rand.npy" "$work/good/trunc.npy" &&
   run_ok --random 3 --seed 5 --truncation 9 --output "$work/good/trunc9" --formats npy --quiet &&
   cmp -s "$work/good/rand.npy" "$work/good/trunc9.npy" &&
   grep -q "^input     3 random latents, N(0, 1), truncated to \[-0.5, 0.5\], seed 5: 3 images" "$work/stdout" &&
   grep -q '"truncation": 0.5,' "$work/good/trunc.json" &&
   "$prog" --device synthetic --seeds 3,4 --truncation 0.7 --formats tar --output "$work/good/ttar" --quiet &&
   tar -xOf "$work/good/ttar-000000.tar" seed0004.json | grep -q '"seed": 4, "truncation": 0.7, "model"'; then
  pass "--truncation: other images; past every draw the same; in the summary, its JSON and the tar samples' json"
else
  fail "--truncation" "$(head -c 300 "$work/stdout")"
fi
# Drawn latents given to the backend as recipes (the synthetic backend drawing them itself, as the CUDA
# backend does on the GPU): the bytes of host latents, for every drawn source, in pieces of any size.
recipes_ok=1
for source in "--random 700 --seed 8" "--seeds 5-300,3,3,18446744073709551615 --truncation 0.6" \
              "--random 333 --seed 2 --truncation 1.5 --chunk 7" "--interpolate 5 --seed 4 --truncation 0.4"; do
  read -r -a drawn_flags <<< "$source"
  rm -f "$work/good/recipe"* "$work/good/host"*
  if ! "$prog" --device synthetic "${drawn_flags[@]}" --formats npy --output "$work/good/host" --quiet ||
     ! FACEGEN_SYNTHETIC_RECIPES=1 "$prog" --device synthetic "${drawn_flags[@]}" --formats npy --output "$work/good/recipe" \
       > "$work/stdout" 2>&1 || ! cmp -s "$work/good/host.npy" "$work/good/recipe.npy" ||
     ! grep -q "^backend .*drawing latents from recipes" "$work/stdout"; then
    recipes_ok=0
    fail "recipes: $source" "$(head -c 300 "$work/stdout")"
  fi
done
[ $recipes_ok = 1 ] && pass "drawn latents as recipes, drawn by the backend: the bytes of host latents (--random, --seeds, --truncation)"
if run_ok --interpolate 3 --output "$work/good/interp" --quiet && [ "$(head -n1 "$work/good/interp.txt")" = 9 ] &&
   [ "$(stat -c %s "$work/good/interp.bmp")" = $((192 * 192 * 3 + 54)) ]; then
  pass "--interpolate 3 writes a 3 x 3 grid"
else
  fail "--interpolate" "no 3 x 3 grid"
fi
if "$prog" --device cpu --random 1 --output "$work/good/default" --formats npy > "$work/stdout" 2>&1 &&
   grep -q "^model .*models/facegen-faces.safetensors" "$work/stdout"; then
  pass "without --model: the shipped models/facegen-faces.safetensors, found beside the program"
else
  fail "default model" "$(head -c 300 "$work/stdout")"
fi
if "$prog" --help > "$work/stdout" 2>&1 && grep -qE -- '--model PATH' "$work/stdout" &&
   grep -qE -- '--random N ' "$work/stdout" && grep -qE -- '--formats LIST' "$work/stdout" &&
   grep -q '^ Input options:' "$work/stdout" && grep -q '^ MPI options:' "$work/stdout" && ! grep -qw 'arg' "$work/stdout"; then
  pass "--help: metavariables (PATH, N, LIST) and sections"
else
  fail "--help" "$(head -12 "$work/stdout")"
fi
"$prog" --version > "$work/stdout"
if grep -qE '^facegen [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{7,}(-dirty)?\)$' "$work/stdout" &&
   grep -qE '^  CUDA  (yes, for sm_[0-9]+|no \(built with)' "$work/stdout" && grep -qE '^  MPI   (yes|no)' "$work/stdout" &&
   grep -qE '^  CPU   -march=.*(AVX|SSE)' "$work/stdout"; then
  pass "--version: version, commit, CUDA, MPI, CPU"
else
  fail "--version" "$(cat "$work/stdout")"
fi

# --- bad command lines ---------------------------------------------------------------------------
out=$work/out/result
expect_error "no --output" 2 "missing --output" --model "$model" --input "$work/l3.txt"
expect_error "--input and --random together" 2 "exactly one of" --random 3 --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "no latents at all" 2 "exactly one of" --model "$model" --output "$out"
expect_error "--random 0" 1 "--random must be between 1 and" --random 0 --model "$model" --output "$out"
# Every numeric flag's bad value names the flag, not only the value.
for flag in --random --interpolate --seed --batch --threads --chunk --gpu --mosaic-tiles --write-threads --progress-every; do
  case $flag in --random|--interpolate) source_args=() ;; *) source_args=(--random 1) ;; esac
  expect_error "$flag abc names the flag" 1 "^facegen: error: $flag expects .*'abc'" "${source_args[@]}" "$flag" abc \
    --model "$model" --output "$out"
done
expect_error "-r abc names --random" 1 "--random expects a whole number, got 'abc'" -r abc --model "$model" --output "$out"
# --seeds LIST: each bad shape is one sentence naming the flag, the piece and what was expected
# (every sentence: tests/test_seed_list.cpp); beside another source or --seed it is refused.
expect_error "--seeds with --input" 2 "^facegen: give exactly one of --input PATH, --random N, --interpolate K, --seeds LIST" \
  --seeds 3 --input "$work/l3.txt" --model "$model" --output "$out"
expect_error "--seeds with --random" 2 "exactly one of" --seeds 3 --random 2 --model "$model" --output "$out"
expect_error "--seeds with --seed" 1 "^facegen: error: --seed applies to --random and --interpolate; with --seeds each" \
  --seeds 3 --seed 3 --model "$model" --output "$out"
seeds_bad=(
  "|--seeds expects seeds such as 0-49999 or 0-99,500,1000-1009, got an empty value"
  "abc|--seeds piece 1, 'abc', is not a seed S or a range FIRST-LAST of whole numbers"
  "0-99,500,x-3|--seeds piece 3, 'x-3', is not a seed S or a range FIRST-LAST of whole numbers"
  "5-3|--seeds piece 1, '5-3', is a descending range \(expected FIRST-LAST with FIRST <= LAST\)"
  "-5|--seeds piece 1, '-5', holds a negative number \(expected seeds from 0 to 18446744073709551615\)"
  "18446744073709551616|--seeds piece 1, '18446744073709551616', holds a number out of range"
  "1,,2|--seeds piece 2 is empty \(expected a seed S or a range FIRST-LAST between the commas\)"
  "0-18446744073709551615|--seeds asks for more images than a run can hold \(at most 4611686018427387903\)"
)
for entry in "${seeds_bad[@]}"; do
  expect_error "--seeds '${entry%%|*}'" 1 "^facegen: error: ${entry#*|}" "--seeds=${entry%%|*}" --model "$model" --output "$out"
done
# --truncation T: drawn latents only, and T a finite number above 0; each refusal one sentence.
expect_error "--truncation with --input" 1 \
  "^facegen: error: --truncation applies to drawn latents \(--random, --seeds, --interpolate\), but --input reads them from a file as they are$" \
  --truncation 1 --input "$work/l3.txt" --model "$model" --output "$out"
for bad in 0 -0.5 abc nan inf -inf 1e999 0x 1,5 ""; do
  expect_error "--truncation '$bad'" 1 "^facegen: error: --truncation expects a finite number greater than 0, got '$bad'$" \
    --random 2 "--truncation=$bad" --model "$model" --output "$out"
done
# No GPU here (CUDA=0 build, or no NVIDIA driver): --device cuda is a fault (3) that says why in plain
# words; auto falls back to the CPU with one notice, silenced by --quiet.
if ! "$prog" --version | grep -q "CUDA  yes" || [ ! -e /proc/driver/nvidia/version ]; then
  expect_error "--device cuda without a GPU: exit 3 and the reason" 3 \
    "^facegen: fault: --device cuda: no NVIDIA GPU is usable here \((no NVIDIA driver is installed|this facegen was built without CUDA: make CUDA=0|no NVIDIA GPU or driver was found)\)$" \
    --device cuda --random 1 --model "$model" --output "$out"
  "$prog" --random 1 --model "$model" --output "$work/good/auto" > /dev/null 2> "$work/stderr"
  if grep -qE "^facegen: no NVIDIA GPU is usable here \([^()]+\); running on the CPU with [0-9]+ threads?$" "$work/stderr" &&
     ! grep -q "insufficient" "$work/stderr" && [ "$(wc -l < "$work/stderr")" = 1 ]; then
    pass "--device auto without a GPU: one plain notice"
  else
    fail "fallback notice" "$(cat "$work/stderr")"
  fi
  "$prog" --quiet --random 1 --model "$model" --output "$work/good/auto" > "$work/stdout" 2> "$work/stderr"
  [ ! -s "$work/stderr" ] && [ ! -s "$work/stdout" ] && pass "--quiet silences the fallback notice" ||
    fail "--quiet notice" "$(cat "$work/stderr")"
fi
# --quiet silences the mosaic-split notice too, and every notice of an MPI job (where mpirun is).
run_ok --random 3 --mosaic-tiles 1 --output "$work/good/split" > /dev/null 2> "$work/stderr"
if grep -q "more than one mosaic holds" "$work/stderr" &&
   run_ok --random 3 --mosaic-tiles 1 --output "$work/good/split" --quiet > "$work/stdout" 2> "$work/stderr" &&
   [ ! -s "$work/stderr" ] && [ ! -s "$work/stdout" ] && [ -f "$work/good/split-0003.bmp" ]; then
  pass "--quiet silences the mosaic-split notice"
else
  fail "--quiet mosaic-split notice" "$(head -c 300 "$work/stderr")"
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  # As the MPI suites: the sanitized binary under mpirun reports the MPI library's own leaks.
  echo "  skip  --quiet on 2 MPI ranks: plain pass only (MPI under the sanitizers)"
elif command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun -np 2 --oversubscribe "$prog" --quiet \
    --all-ranks --random 3 --mosaic-tiles 1 --model "$model" --output "$work/good/msplit" > "$work/stdout" 2> "$work/stderr"
  if [ $? = 0 ] && [ ! -s "$work/stderr" ] && [ ! -s "$work/stdout" ] && [ -f "$work/good/msplit-0003.bmp" ]; then
    pass "--quiet on 2 MPI ranks (device auto, mosaic split): nothing printed"
  else
    fail "--quiet on 2 MPI ranks" "$(head -c 300 "$work/stderr")"
  fi
fi
# Long prefixes: every output name up to NAME_MAX (255 here) works, though its temporary name
# (".tmp-XXXXXX" more) would not fit; a name that cannot fit is refused before anything is written.
mkdir -p "$work/long"
long245=$(printf 'p%.0s' $(seq 245))
if run_ok --random 2 --formats txt,bmp,npy,png --output "$work/long/$long245" --quiet 2> "$work/stderr" &&
   [ -s "$work/long/$long245.txt" ] && [ -s "$work/long/$long245.npy" ] && [ -d "$work/long/$long245" ] &&
   [ -z "$(ls -A "$work/long" | grep -E '\.tmp-')" ]; then
  pass "a prefix of 245 bytes (outputs of 249): txt, bmp, npy and png written, nothing left"
else
  fail "a prefix of 245 bytes" "$(head -c 300 "$work/stderr"); $(ls -A "$work/long" | head -c 300)"
fi
# Over an old set of the same names: the commit's backups (".facegen-old-TOKEN-K") are short
# whatever the output's name (a backup named after a 255-byte output would not fit).
long251=$(printf 'o%.0s' $(seq 251))
run_ok --random 2 --formats txt,bmp,npy --output "$work/long/$long251" --quiet 2> "$work/stderr"
if run_ok --random 2 --seed 9 --formats txt,bmp,npy --output "$work/long/$long251" --quiet 2>> "$work/stderr" &&
   [ "$(ls -A "$work/long" | grep -c "^$long251")" = 3 ] && [ -z "$(ls -A "$work/long" | grep -E '^\.')" ]; then
  pass "a prefix of 251 bytes (outputs of 255) over an old set: replaced, nothing left"
else
  fail "a prefix of 251 bytes over an old set" "$(head -c 300 "$work/stderr"); $(ls -A "$work/long" | grep -v '^p' | head -c 300)"
fi
rm -f "$work/long/$long251".*
long252=$(printf 'q%.0s' $(seq 252))
expect_error "a prefix of 252 bytes" 1 "^facegen: error: --output .*/q+ ends in a name of 252 bytes, too long for its outputs \(name \+ \".txt\"\) in .*, whose limit is 255 bytes a name$" \
  --device cpu --model "$model" --random 2 --output "$work/long/$long252"
long247=$(printf 'm%.0s' $(seq 247))
expect_error "numbered mosaic names over NAME_MAX" 1 "cannot create output file .*m-0001\.bmp: File name too long" \
  --device cpu --model "$model" --random 3 --mosaic-tiles 1 --quiet --output "$work/long/$long247"
[ -z "$(ls -A "$work/long" | grep -E '^[qm]')" ] && pass "long prefixes refused: nothing created" ||
  fail "long prefixes refused" "left: $(ls -A "$work/long" | grep -E '^[qm]' | head -c 300)"

expect_error "unknown flag" 2 "^facegen: unknown flag --nosuch \(see --help\)$" --nosuch --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "unknown one-letter flag" 2 "^facegen: unknown flag -X \(see --help\)$" -X --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "a flag without its value" 2 "^facegen: --output needs a value \(see --help\)$" --model "$model" --input "$work/l3.txt" --output
expect_error "bad --device" 1 "unknown --device 'tpu'" --device tpu --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "--device gpu is no name of a device" 1 "^facegen: error: unknown --device 'gpu' \(expected auto, cuda, cpu or synthetic; cuda is the NVIDIA GPU\)$" \
  --device gpu --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "bad --formats" 1 "unknown output format 'gif'" --formats txt,gif --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "bad --precision" 1 "unknown --precision 'fp64'" --precision fp64 --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "bf16 on the CPU" 1 "CUDA GPU only" --device cpu --precision bf16 --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "bad --batch" 1 "--batch must be" --batch 0 --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "bad --mosaic-tiles" 1 "--mosaic-tiles must be between 1 and 418" --mosaic-tiles 419 --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "--png-level 13" 1 "^facegen: error: --png-level must be between 0 and 12, got 13$" --png-level 13 --formats png --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "--png-level -1" 1 "^facegen: error: --png-level must be between 0 and 12, got -1$" --png-level -1 --formats mosaic-png --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "--png-level abc" 1 "^facegen: error: --png-level expects a whole number, got 'abc'$" --png-level abc --formats png --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "--png-level without a PNG format" 1 "^facegen: error: --png-level sets the formats that hold PNGs \(png, mosaic-png, tar\), but --formats asks for none of them$" --png-level 1 --formats txt,bmp --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "bad --chunk" 1 "--chunk must be between" --chunk 0 --model "$model" --input "$work/l3.txt" --output "$out"
expect_error "png folder's directory missing" 1 "cannot create output folder .*nodir/r" --formats png --model "$model" --input "$work/l3.txt" --output "$work/nodir/r" --device cpu

# --- every flag: given twice, where the run would ignore it, beside one it contradicts ----------------
# The flags come from --help, so that a flag added later is tested here or the test says it is not.
mapfile -t every_flag < <("$prog" --help | grep -oE '^ +(-[a-zA-Z], )?--[a-z0-9-]+' | sed 's/.*--//')
[ ${#every_flag[@]} -ge 30 ] || fail "the flags of --help" "read only ${#every_flag[@]}: ${every_flag[*]}"
# A value each flag takes ("": none).
declare -A sample=(
  [input]=$work/l3.txt [random]=2 [interpolate]=2 [seeds]=1-2 [seed]=3 [model]=$model [output]=$out [formats]=txt
  [mosaic-tiles]=4 [grid-columns]=2 [shard-images]=2 [grid-padding]=1 [png-level]=1 [resume]= [summary-json]=$work/s.json
  [finish-commit]=$work/out/.facegen-commit-x [device]=cpu [gpu]=0 [precision]=fp32 [batch]=4 [threads]=1 [chunk]=4
  [write-threads]=1 [quiet]= [progress-every]=1 [help]= [version]= [verbose]= [all-ranks]= [min-images-per-rank]=1
  [images-per-round]=4 [mpi]= [truncation]=0.5 [png-layout]=subfolders
)
# Where a run would not use each flag: the flags of such a run, then the sentence that refuses it;
# "always" for a flag that every run uses.
declare -A unused_in=(
  [input]=always [random]=always [interpolate]=always [seeds]=always [output]=always [formats]=always
  [device]=always [precision]=always [threads]=always [chunk]=always [write-threads]=always [quiet]=always
  [help]=always [version]=always [mpi]=always [summary-json]=always [finish-commit]=always
  [seed]="--input $work/l3.txt|--seed is the seed of --random and --interpolate, and the latents of --input are read from its file"
  [truncation]="--input $work/l3.txt|--truncation applies to drawn latents \(--random, --seeds, --interpolate\), but --input reads them from a file as they are"
  [gpu]="--device cpu --random 1|--gpu picks the CUDA device of --device cuda or auto, and this run's --device names none"
  [batch]="--device cpu --random 1|--batch sets the images of a GPU batch, and this run's --device uses no GPU"
  [model]="--device synthetic --random 1|--model names the generator, and --device synthetic draws test images without one"
  [mosaic-tiles]="--formats npy --random 1|--mosaic-tiles splits the mosaic formats \(bmp, mosaic-png\), and --formats asks for none of them"
  [grid-columns]="--formats txt --random 1|--grid-columns lays out the mosaic formats \(bmp, mosaic-png\), but --formats asks for none"
  [grid-padding]="--formats png --random 1|--grid-padding lays out the mosaic formats \(bmp, mosaic-png\), but --formats asks for none"
  [shard-images]="--formats png --random 1|--shard-images splits the formats tar, npy and npy-u8, but --formats asks for none"
  [png-level]="--formats npy --random 1|--png-level sets the formats that hold PNGs \(png, mosaic-png, tar\), but --formats asks"
  [png-layout]="--formats tar --random 1|--png-layout lays out the png format's folder, but --formats asks for no png$"
  [resume]="--formats txt --random 1|--resume keeps the finished files of outputs made of many files"
  [progress-every]="--quiet --random 1|--progress-every paces the progress lines, and --quiet shows none"
  [verbose]="--random 1|--verbose applies to the ranks of a parallel job \(under mpirun or srun, or with --mpi\), and this run is one process"
  [all-ranks]="--random 1|--all-ranks applies to the ranks of a parallel job"
  [min-images-per-rank]="--random 1|--min-images-per-rank applies to the ranks of a parallel job"
  [images-per-round]="--random 1|--images-per-round applies to the ranks of a parallel job"
)
for flag in "${every_flag[@]}"; do
  if [ -z "${sample[$flag]+set}" ] || [ -z "${unused_in[$flag]+set}" ]; then
    fail "--$flag" "test_cli.sh has no sample value or no rule of use for --$flag: add them"
    continue
  fi
  given=(--"$flag")
  [ -n "${sample[$flag]}" ] && given+=("${sample[$flag]}")
  # Given twice, where anything else would do: refused before it could take one of the two.
  expect_error "--$flag given twice" 1 "^facegen: error: --$flag is given twice( \('[^']*', then '[^']*'\))?; give it once$" \
    "${given[@]}" "${given[@]}" --model "$model" --random 1 --output "$out"
  # Beside --finish-commit, which runs nothing.
  case $flag in finish-commit|help|version) ;; *)
    expect_error "--finish-commit with --$flag" 1 "^facegen: error: --finish-commit only finishes a killed run's commit and runs nothing, so --$flag has nothing to act on; give it alone$" \
      --finish-commit "$work/out/.facegen-commit-x" "${given[@]}" ;;
  esac
  [ "${unused_in[$flag]}" = always ] && continue
  read -r -a context <<< "${unused_in[$flag]%%|*}"
  with_model=(--model "$model")
  [ "$flag" = model ] && with_model=()
  expect_error "--$flag where the run would not use it" 1 "^facegen: error: ${unused_in[$flag]#*|}" \
    "${given[@]}" "${context[@]}" "${with_model[@]}" --output "$out"
done
expect_error "one flag by its letter and its name" 1 "^facegen: error: --output is given twice \('$out', then '$work/out/other'\); give it once$" \
  -o "$out" --output "$work/out/other" --model "$model" --random 1
expect_error "--random given twice" 1 "^facegen: error: --random is given twice \('2', then '3'\); give it once$" \
  --random 2 --random 3 --model "$model" --output "$out"
# Flags that contradict each other (a latent source beside another: "exactly one of" above).
contradictions=(
  "--verbose --quiet --mpi --random 1|--verbose asks every rank to report itself, and --quiet for nothing but errors; give one"
  "--chunk 4 --images-per-round 4 --mpi --random 1|--images-per-round is --chunk under another name; give one"
  "--formats png,png --random 1|--formats 'png,png' lists png twice; list each format once"
  "--formats txt,bmp,text --random 1|--formats 'txt,bmp,text' lists txt twice \(text is txt\); list each format once"
  "--gpu 1 --mpi --random 1|--gpu picks the GPU of a single-process run"
  "--seeds 0-9,5 --formats png|--seeds lists seed 5 more than once \(images 5 and 10\), but --formats png names each image by its seed \(seed0005\)"
  "--seeds 3,18446744073709551615,3 --formats txt,tar|--seeds lists seed 3 more than once \(images 0 and 2\), but --formats tar names"
)
for entry in "${contradictions[@]}"; do
  read -r -a flags_of <<< "${entry%%|*}"
  expect_error "${entry%%|*}" 1 "^facegen: error: ${entry#*|}" "${flags_of[@]}" --model "$model" --output "$out"
done
# A seed listed twice is fine where no output is named by seed: each place gets its image.
if run_ok --seeds 5,0-9,5 --formats txt,npy --output "$work/good/repeat" --quiet; then
  pass "--seeds 5,0-9,5 --formats txt,npy: a repeated seed where no output names images by seed"
else
  fail "--seeds with a repeated seed, txt and npy" "refused"
fi
# --input -: standard input, a pipe or a file given as it.
run_ok --input "$work/l3.txt" --output "$work/good/from-file" --formats txt,npy --quiet
if run_ok --input - --output "$work/good/from-redirect" --formats txt,npy --quiet < "$work/l3.txt" &&
   cat "$work/l3.txt" | run_ok --input - --output "$work/good/from-pipe" --formats txt,npy --quiet &&
   cmp -s "$work/good/from-file.txt" "$work/good/from-redirect.txt" && cmp -s "$work/good/from-file.npy" "$work/good/from-pipe.npy" &&
   cmp -s "$work/good/from-file.txt" "$work/good/from-pipe.txt"; then
  pass "--input -: standard input, redirected from a file or a pipe, as the file itself"
else
  fail "--input -" "outputs differ from --input FILE's, or the run failed"
fi
expect_error "--input - with nothing on standard input" 1 "^facegen: error: .*/dev/stdin.*(empty|N)" --input - --model "$model" --output "$out" --device cpu < /dev/null
# tools/export_model.py where its Python lacks what it needs: one sentence naming what to install.
printf 'PK\003\004 a zip archive, as torch.save writes' > "$work/netG.pth"
mkdir -p "$work/fake-numpy/numpy" && : > "$work/fake-numpy/numpy/__init__.py"
for case in "no numpy||this script needs numpy, which the Python at .* lacks: install it \(Debian: apt install python3-numpy; else: .* -m pip install numpy\)" \
            "numpy without torch|$work/fake-numpy|$work/netG.pth is not a network.bin, and reading a PyTorch file needs torch, which the Python at .* lacks: install it"; do
  IFS='|' read -r name path pattern <<< "$case"
  PYTHONPATH=$path /usr/bin/python3 -S "$(dirname "$0")/../tools/export_model.py" "$work/netG.pth" "$work/out.safetensors" > /dev/null 2> "$work/stderr"
  got=$?
  if [ $got = 1 ] && [ "$(wc -l < "$work/stderr")" = 1 ] && grep -qE "^export_model: error: $pattern" "$work/stderr" && [ ! -e "$work/out.safetensors" ]; then
    pass "tools/export_model.py, $name: exit 1, $(cat "$work/stderr")"
  else
    fail "tools/export_model.py, $name" "status $got: $(head -c 300 "$work/stderr")"
  fi
done

# --- bad models -----------------------------------------------------------------------------------
printf 'PK\003\004 a zip archive, as torch.save writes' > "$work/netG.pth"
expect_error "a PyTorch file as the model" 1 "netG.pth is a PyTorch file \(torch.save\), which facegen does not read: make a safetensors file of it with .tools/export_model.py" --model "$work/netG.pth" --input "$work/l3.txt" --output "$out" --device cpu
printf '\200\002 a pickle, as the old torch.save writes' > "$work/old.pth"
expect_error "an old PyTorch pickle as the model" 1 "old.pth is a PyTorch file" --model "$work/old.pth" --input "$work/l3.txt" --output "$out" --device cpu
expect_error "model missing" 1 "nosuch.bin.*(No such file|cannot)" --model "$work/nosuch.bin" --input "$work/l3.txt" --output "$out" --device cpu
head -c 1000 "$model" > "$work/short.bin"
expect_error "model too short" 1 "20,?549,?132.*1,?000|1,?000.*20,?549,?132" --model "$work/short.bin" --input "$work/l3.txt" --output "$out" --device cpu
cp "$model" "$work/long.bin" && printf 'xxxx' >> "$work/long.bin"
expect_error "model too long" 1 "20,?549,?136" --model "$work/long.bin" --input "$work/l3.txt" --output "$out" --device cpu
cp "$model" "$work/nan.bin" && printf '\x00\x00\xc0\x7f' | dd of="$work/nan.bin" bs=1 seek=$((4 * 900000)) conv=notrunc status=none
expect_error "model with NaN" 1 "(NaN|nan).*tconv1|tconv1.*(NaN|nan)" --model "$work/nan.bin" --input "$work/l3.txt" --output "$out" --device cpu
cp "$model" "$work/inf.bin" && printf '\x00\x00\x80\x7f' | dd of="$work/inf.bin" bs=1 seek=$((4 * 10)) conv=notrunc status=none
expect_error "model with Inf" 1 "(Inf|inf).*proj|proj.*(Inf|inf)" --model "$work/inf.bin" --input "$work/l3.txt" --output "$out" --device cpu
# bn0 var[5]: proj (100*8192 + 8192 floats), then beta, gamma, mean (512 each), then var.
cp "$model" "$work/var.bin" && printf '\x00\x00\x80\xbf' | dd of="$work/var.bin" bs=1 seek=$((4 * (827392 + 3 * 512 + 5))) conv=notrunc status=none
expect_error "model with var + eps <= 0" 1 "bn0 var\[5\]" --model "$work/var.bin" --input "$work/l3.txt" --output "$out" --device cpu
mkdir -p "$work/dir.bin"
expect_error "model is a directory" 1 "dir.bin" --model "$work/dir.bin" --input "$work/l3.txt" --output "$out" --device cpu

# --- bad latent files -----------------------------------------------------------------------------
bad_input() {  # bad_input NAME PATTERN CONTENT
  printf '%b' "$3" > "$work/bad.txt"
  expect_error "$1" 1 "$2" --model "$model" --input "$work/bad.txt" --output "$out" --device cpu
}
expect_error "input missing" 1 "nosuch.txt" --model "$model" --input "$work/nosuch.txt" --output "$out" --device cpu
bad_input "input empty" "bad.txt.*(empty|missing|N)" ""
bad_input "N not an integer" "bad.txt:1:1.*[\"']2\.5[\"']" "2.5\n1 2 3"
bad_input "N a word" "bad.txt:1:1.*[\"']abc[\"']" "abc\n1 2 3"
bad_input "N zero" "bad.txt.*0" "0\n"
bad_input "N negative" "bad.txt.*-3" "-3\n1 2"
bad_input "N larger than the file can hold" "bad.txt.*1,?000,?000.*14 bytes" "1000000\n1 2 3\n"
latents "$work/few.txt" 2 199
expect_error "too few numbers" 1 "few.txt.*199.*200|few.txt.*200.*199" --model "$model" --input "$work/few.txt" --output "$out" --device cpu
latents "$work/many.txt" 2 201
expect_error "too many numbers" 1 "many.txt:2:[0-9]+.*(unexpected|more|extra).*200" --model "$model" --input "$work/many.txt" --output "$out" --device cpu
bad_input "a token that is not a number" "bad.txt:2:5.*[\"']0\.5x[\"'].*not a number" "1\n0.1 0.5x 0.3 $(printf '0.1 %.0s' {1..97})\n"
bad_input "NaN in a latent" "bad.txt:2:[0-9]+.*[\"']nan[\"'].*value 51" "1\n$(printf '0.1 %.0s' {1..50}) nan $(printf '0.1 %.0s' {1..49})\n"
bad_input "Inf in a latent" "bad.txt:2:[0-9]+.*[\"']1e999[\"'].*value 100" "1\n$(printf '0.1 %.0s' {1..99}) 1e999\n"

# --- bad outputs ----------------------------------------------------------------------------------
expect_error "--output ''" 1 "--output takes a path prefix such as outputs/run1 .*, got ''" --model "$model" --input "$work/l3.txt" --output '' --device cpu
expect_error "--output named as facegen's own files" 1 "--output .*/\.facegen-old-x begins as facegen's own journals, backups and locks are named" --model "$model" --input "$work/l3.txt" --output "$work/.facegen-old-x" --device cpu
expect_error "--output dir/" 1 "--output takes a path prefix .*, got '$work/'" --model "$model" --input "$work/l3.txt" --output "$work/" --device cpu
expect_error "--output over the input file" 1 "--output $work/l3 would overwrite the input file $work/l3.txt" --model "$model" --input "$work/l3.txt" --output "$work/l3" --device cpu
# Only the formats asked for count: the same prefix with --formats npy writes l3.npy beside l3.txt.
cp "$work/l3.txt" "$work/l3-0002.bmp"
expect_error "--output whose numbered mosaic names the input" 1 "--output $work/l3 would overwrite the input file $work/l3-0002.bmp" --model "$model" --input "$work/l3-0002.bmp" --output "$work/l3" --formats bmp --device cpu
mkdir -p "$work/pngs" && cp "$work/l3.txt" "$work/pngs/l3.txt"
expect_error "--output whose PNG folder holds the input" 1 "--output $work/pngs would overwrite the input file $work/pngs/l3.txt" --model "$model" --input "$work/pngs/l3.txt" --output "$work/pngs" --formats png --device cpu
# The model is read as well: a model named m.txt, m.bmp, ... is not an output's to replace.
cp "$model" "$work/m.txt"
expect_error "--output over the model file" 1 "--output $work/m would overwrite the model file $work/m.txt \(as $work/m.txt\)" --model "$work/m.txt" --input "$work/l3.txt" --output "$work/m" --device cpu
cmp -s "$model" "$work/m.txt" || fail "--output over the model file" "the model file was changed"
# --summary-json may replace neither a file the run reads nor one of its outputs, however spelt.
expect_error "--summary-json over the input file" 1 "--summary-json $work/../${work##*/}/l3.txt would overwrite the input file $work/l3.txt; choose another path" --model "$model" --input "$work/l3.txt" --output "$work/out/r" --device cpu --summary-json "$work/../${work##*/}/l3.txt"
expect_error "--summary-json over the model file" 1 "--summary-json $work/m.txt would overwrite the model file" --model "$work/m.txt" --input "$work/l3.txt" --output "$work/out/r" --device cpu --summary-json "$work/m.txt"
expect_error "--summary-json over the text output" 1 "--summary-json $work/out/./r.txt is one of the outputs of --output $work/out/r; choose another path" --model "$model" --input "$work/l3.txt" --output "$work/out/r" --device cpu --summary-json "$work/out/./r.txt"
expect_error "--summary-json over a numbered mosaic" 1 "is one of the outputs of --output" --model "$model" --input "$work/l3.txt" --output "$work/out/r" --device cpu --mosaic-tiles 1 --summary-json "$work/out/r-0003.bmp"
expect_error "--summary-json inside the PNG folder" 1 "is one of the outputs of --output" --model "$model" --input "$work/l3.txt" --output "$work/out/r" --formats png --device cpu --summary-json "$work/out/r/summary.json"
if "$prog" --model "$model" --input "$work/l3.txt" --output "$work/l3" --formats npy --device cpu -q 2> "$work/stderr" &&
   [ -s "$work/l3.npy" ] && [ "$(head -c 2 "$work/l3.txt")" = "3" ]; then
  pass "--output beside the input, in a format that does not touch it"
else
  fail "--output beside the input, in a format that does not touch it" "$(head -c 300 "$work/stderr")"
fi
rm -rf "$work/l3.npy" "$work/l3-0002.bmp" "$work/pngs"
expect_error "output directory missing" 1 "nodir" --model "$model" --input "$work/l3.txt" --output "$work/nodir/r" --device cpu
if mkdir -p "$work/ro" && mount -t tmpfs -o size=1m,ro tmpfs "$work/ro" 2>/dev/null; then
  mounts+=("$work/ro")
  expect_error "output directory read-only" 1 "ro/r\.(txt|bmp).*(Read-only|Permission)" --model "$model" --input "$work/l3.txt" --output "$work/ro/r" --device cpu
else
  echo "  skip  output directory read-only: cannot mount a tmpfs here (needs root)"
fi
if mkdir -p "$work/full" && mount -t tmpfs -o size=64k tmpfs "$work/full" 2>/dev/null; then
  mounts+=("$work/full")
  latents "$work/l20.txt" 20
  "$prog" --device cpu --model "$model" --input "$work/l20.txt" --output "$work/full/r" > /dev/null 2> "$work/stderr"
  got=$?
  if [ "$got" -eq 1 ] && grep -q "No space left on device" "$work/stderr" && [ -z "$(ls -A "$work/full")" ]; then
    pass "disk full: $(cat "$work/stderr")"
  else
    fail "disk full" "status $got, files: $(ls "$work/full"), stderr: $(cat "$work/stderr")"
  fi
else
  echo "  skip  disk full: cannot mount a tmpfs here (needs root)"
fi

suite_end --bare
