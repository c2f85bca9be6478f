#!/usr/bin/env bash
# mpi_ranks.sh: build/facegen as an MPI job on this machine (CPU backend, mpirun --oversubscribe).
#
# 1, 2, 3 and 5 ranks on N = 1, 7 and 64 (a text file, and .npy float32 and float64) must write files
# byte-identical to the single-process program's, every generating rank reading its own share of the
# input (and drawing its own --random and --interpolate latents; rank 0 alone where the latents come
# from a named pipe), in every format and with any number of writer threads; the job splits at the
# edges of its outputs' files (an output of one file, txt, goes to one rank); small jobs leave ranks
# out; a folder of PNGs in subfolders is shared out in whole subfolders; a failing rank (an error, a crash, a kill) ends the job within seconds with one line naming rank
# and host, a non-zero status and no output file; bad input and an unwritable output are reported as
# the single-process program reports them. Launches go through
# run_parallel.sh, as users run it. Usage: tests/suites/mpi_ranks.sh [build-dir]; exit 0 pass,
# 77 skipped (says why), 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh mpi_ranks
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "mpi_ranks: $prog or $model is missing (run make)"; exit 1; }
command -v mpirun > /dev/null || skip_suite "mpirun is not installed (make deps installs openmpi-bin)"
ldd "$prog" | grep -q libmpi || skip_suite "$prog was built without MPI (libopenmpi-dev missing at build time)"
# OpenMPI refuses root unless told; CI runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FACEGEN_TEST_FAULT

work=$(mktemp -d /tmp/facegen-mpi.XXXXXX)
on_exit 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"'

latents() {  # latents FILE N: N seeded latent vectors
  /usr/bin/python3 - "$1" "$2" <<'PY'
import random, sys
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1000 + n)
with open(path, "w") as f:
    f.write(f"{n}\n")
    for i in range(n):
        f.write(" ".join(f"{rng.gauss(0, 1):.6f}" for _ in range(100)) + "\n")
PY
}

# parallel RANKS PREFIX INPUT [facegen flags]: run_parallel.sh on this machine, CPU backend, 60 s at most.
parallel() {
  local ranks=$1 prefix=$2 input=$3
  shift 3
  timeout 60 ./run_parallel.sh --program "$prog" --model "$model" --input "$input" --output "$prefix" \
    --ranks-per-node "$ranks" -- --device cpu "$@" > "$work/stdout" 2> "$work/stderr"
}

# same_files NAME PREFIX REFERENCE EXTENSIONS...: every PREFIX.ext equals REFERENCE.ext byte for byte.
same_files() {
  local name=$1 prefix=$2 reference=$3 ext
  shift 3
  for ext in "$@"; do
    if ! cmp -s "$prefix.$ext" "$reference.$ext"; then
      fail "$name" "$prefix.$ext differs from the single-process $reference.$ext ($(cmp "$prefix.$ext" "$reference.$ext" 2>&1 | head -1))"
      return 1
    fi
  done
  return 0
}

same_set() {  # same_set NAME DIR PATTERN REFERENCE_PATTERN: the same names and bytes
  local name=$1 got ref f
  got=$(cd "$work" && ls -d $3 2>/dev/null | sed "s/^${3%%\**}//" | sort)
  ref=$(cd "$work" && ls -d $4 2>/dev/null | sed "s/^${4%%\**}//" | sort)
  if [ -z "$ref" ] || [ "$got" != "$ref" ]; then
    fail "$name" "other files than one process wrote: $(diff <(echo "$ref") <(echo "$got") | head -4)"
    return 1
  fi
  for f in $ref; do
    if ! cmp -s "$work/${3%%\**}$f" "$work/${4%%\**}$f"; then
      fail "$name" "${3%%\**}$f differs: $(cmp "$work/${3%%\**}$f" "$work/${4%%\**}$f" 2>&1 | head -1)"
      return 1
    fi
  done
}
no_outputs() {  # no_outputs DIR: what DIR holds besides keep.txt
  ls -A "$1" | grep -vx 'keep.txt' || true
}

echo "facegen over MPI ranks ($(mpirun --version | head -1)):"

# --- byte-identical outputs for every rank count ------------------------------------------------
# Outputs of many files (tar and npy-u8 shards of 2, a PNG folder): every rank generates where the job
# has a block for it. txt and bmp (one file each): one rank makes them, the others sit out.
splitting=(--formats tar,npy-u8,png --shard-images 2)
for n in 1 7 64; do
  latents "$work/l$n.txt" "$n"
  "$prog" --device cpu --model "$model" --input "$work/l$n.txt" --output "$work/ref$n" --quiet ||
    { fail "single-process reference N=$n" "exit status $?"; continue; }
  "$prog" --device cpu --model "$model" --input "$work/l$n.txt" --output "$work/sref$n" "${splitting[@]}" --quiet ||
    { fail "single-process reference N=$n, ${splitting[*]}" "exit status $?"; continue; }
  for ranks in 1 2 3 5; do
    name="$ranks rank(s), N=$n, ${splitting[*]}: identical to one process"
    rm -rf "$work/q${ranks}_$n"*
    if ! parallel "$ranks" "$work/q${ranks}_$n" "$work/l$n.txt" --all-ranks "${splitting[@]}"; then
      fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
    elif same_set "$name" "q${ranks}_$n" "q${ranks}_$n*" "sref$n*"; then
      blocks=$(( (n + 1) / 2 ))
      generating=$(( ranks < blocks ? ranks : blocks ))
      if [ "$generating" -eq "$ranks" ] && ! grep -q "^ranks     $ranks on 1 host; all generate" "$work/stdout"; then
        fail "$name" "summary does not say all $ranks ranks generate: $(grep '^ranks' "$work/stdout")"
      elif ! grep -q "; shares of whole blocks of $(( n < 2 ? n : 2 )) image" "$work/stdout"; then
        fail "$name" "summary does not name the blocks: $(grep '^ranks' "$work/stdout")"
      else
        pass "$name ($generating generating)"
      fi
    fi
    name="$ranks rank(s), N=$n, txt and bmp: identical to one process, made by one rank"
    if ! parallel "$ranks" "$work/p${ranks}_$n" "$work/l$n.txt" --all-ranks; then
      fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
    elif same_files "$name" "$work/p${ranks}_$n" "$work/ref$n" txt bmp; then
      if [ "$ranks" -gt 1 ] && ! grep -q "^ranks     $ranks on 1 host; 1 generates, $((ranks - 1)) sits\? out (the job has 1 block)" "$work/stdout"; then
        fail "$name" "summary: $(grep '^ranks' "$work/stdout")"
      else
        pass "$name"
      fi
    fi
  done
done

# --- every format that splits, several pieces per rank, several writer threads ------------------
# bmp split into 8 numbered files of 9 (--mosaic-tiles 3), a folder of PNGs, the PNG mosaic split
# likewise, tar and npy-u8 in shards of 9: byte for byte the single process's files, whatever the
# ranks and threads; pieces of 4 images (--images-per-round) inside blocks of 9.
all_formats="bmp,png,mosaic-png,tar,npy-u8"
"$prog" --device cpu --model "$model" --input "$work/l64.txt" --output "$work/ref64f" --formats "$all_formats" \
  --mosaic-tiles 3 --shard-images 9 --write-threads 2 --quiet 2> /dev/null
threads=0
for ranks in 1 2 3 5; do
  threads=$((threads % 3 + 1))
  name="$ranks rank(s), N=64, $all_formats, pieces of 4 images, $threads writer thread(s): identical"
  rm -rf "$work/f64"*
  if ! parallel "$ranks" "$work/f64" "$work/l64.txt" --all-ranks --formats "$all_formats" --mosaic-tiles 3 \
       --shard-images 9 --images-per-round 4 --write-threads "$threads"; then
    fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
    continue
  fi
  if ! diff -r "$work/f64" "$work/ref64f" > /dev/null; then
    fail "$name" "the PNG folder differs: $(diff -rq "$work/f64" "$work/ref64f" | head -2)"
  elif same_set "$name" f64 'f64-*' 'ref64f-*'; then
    if grep -q "^ranks     $ranks on 1 host; all generate.*; shares of whole blocks of 9 images" "$work/stdout"; then
      pass "$name"
    else
      fail "$name" "not every rank generates in blocks of 9: $(grep "^ranks" "$work/stdout")"
    fi
  fi
done


# --- a folder of PNGs alone: the job splits at any image, each rank writes its share's files ------
"$prog" --device cpu --model "$model" --input "$work/l64.txt" --output "$work/png-ref" --formats png --quiet
for ranks in 2 3; do
  name="$ranks rank(s), N=64, a folder of PNGs alone, pieces of 5: identical, every rank generating"
  rm -rf "$work/png-got"
  if ! parallel "$ranks" "$work/png-got" "$work/l64.txt" --all-ranks --formats png --images-per-round 5; then
    fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
  elif ! diff -r "$work/png-got" "$work/png-ref" > /dev/null; then
    fail "$name" "the folders differ: $(diff -rq "$work/png-got" "$work/png-ref" | head -2)"
  elif ! grep -q "^ranks     $ranks on 1 host; all generate" "$work/stdout"; then
    fail "$name" "not every rank generates: $(grep '^ranks' "$work/stdout")"
  else
    pass "$name"
  fi
done

# --- a folder of PNGs in subfolders: each rank makes whole subfolders --------------------------
# 3,100 synthetic images: subfolders of 1,000, 1,000, 1,000 and 100, shared out whole.
"$prog" --device synthetic --random 3100 --output "$work/sub-ref" --formats png --png-layout subfolders --quiet
for ranks in 2 3; do
  name="$ranks ranks, 3,100 images, --png-layout subfolders: identical, every rank making whole subfolders"
  rm -rf "$work/sub-got"
  if ! timeout 60 ./run_parallel.sh --program "$prog" --random 3100 --output "$work/sub-got" --ranks-per-node "$ranks" \
       -- --device synthetic --all-ranks --formats png --png-layout subfolders > "$work/stdout" 2> "$work/stderr"; then
    fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
  elif ! diff -r "$work/sub-got" "$work/sub-ref" > /dev/null; then
    fail "$name" "the folders differ: $(diff -rq "$work/sub-got" "$work/sub-ref" | head -2)"
  elif ! grep -q "^ranks     $ranks on 1 host; all generate.*; shares of whole blocks of 1000 images" "$work/stdout"; then
    fail "$name" "not every rank generates whole subfolders: $(grep '^ranks' "$work/stdout")"
  else
    pass "$name"
  fi
done

# --- shards: tar, npy and npy-u8 split by --shard-images; npy-u8 and tar's default shards ------
# Pieces of 3 images against shards of 5: pieces end at the shards' edges, every shard is one rank's.
# Every file byte for byte the single process's.
shard_formats="tar,npy,npy-u8"
"$prog" --device cpu --model "$model" --input "$work/l64.txt" --output "$work/ref64s" --formats "$shard_formats" \
  --shard-images 5 --write-threads 1 --quiet 2> /dev/null
"$prog" --device cpu --model "$model" --input "$work/l64.txt" --output "$work/ref64u" --formats npy-u8,tar \
  --write-threads 3 --quiet 2> /dev/null
for ranks_threads in "1 7" "2 1" "3 2" "5 3"; do
  read -r ranks threads <<< "$ranks_threads"
  name="$ranks rank(s), N=64, $shard_formats in shards of 5, pieces of 3, $threads writer thread(s): identical"
  rm -rf "$work/s64"* "$work/u64"*
  if ! parallel "$ranks" "$work/s64" "$work/l64.txt" --all-ranks --formats "$shard_formats" --shard-images 5 \
       --images-per-round 3 --write-threads "$threads"; then
    fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
  elif same_set "$name" s64 's64*' 'ref64s*'; then
    pass "$name"
  fi
  name="$ranks rank(s), N=64, npy-u8 and tar unsplit by the flag, pieces of 7: identical"
  if ! parallel "$ranks" "$work/u64" "$work/l64.txt" --all-ranks --formats npy-u8,tar --images-per-round 7 \
       --write-threads "$threads"; then
    fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
  elif same_set "$name" u64 'u64*' 'ref64u*'; then
    pass "$name"
  fi
done
# --- mosaic grids (--grid-columns, --grid-padding) over a split: the single process's bytes -----------
grid_flags=(--formats bmp,mosaic-png --mosaic-tiles 3 --grid-columns 2 --grid-padding 3)
"$prog" --device cpu --model "$model" --input "$work/l64.txt" --output "$work/grid-ref" "${grid_flags[@]}" \
  --quiet 2> /dev/null
for ranks in 2 3; do
  name="$ranks rank(s), N=64, 8 mosaic files of 2 columns, padding 3 (odd BMP rows), pieces of 4: identical"
  rm -f "$work/grid-got"*
  if ! parallel "$ranks" "$work/grid-got" "$work/l64.txt" --all-ranks --images-per-round 4 "${grid_flags[@]}"; then
    fail "$name" "exit status $?: $(head -c 400 "$work/stderr")"
    continue
  fi
  for k in 1 2 3 4 5 6 7 8; do same_files "$name" "$work/grid-got-000$k" "$work/grid-ref-000$k" bmp png || continue 2; done
  pass "$name"
done

# --- --device synthetic needs no model file, over MPI as in one process ------------------------------
name="2 ranks, --device synthetic without --model: no model read, txt and npy identical to one process"
drawn=(--device synthetic --formats txt,npy --seed 6 --quiet)
if ! "$prog" --random 9 "${drawn[@]}" --output "$work/sref" 2> "$work/stderr"; then
  fail "$name" "one process: $(head -c 300 "$work/stderr")"
elif ! timeout 60 ./run_parallel.sh --program "$prog" --random 9 --output "$work/stwo" --ranks-per-node 2 -- "${drawn[@]}" \
     --all-ranks > "$work/stdout" 2> "$work/stderr"; then
  fail "$name" "2 ranks: $(head -c 300 "$work/stderr")"
elif same_files "$name" "$work/stwo" "$work/sref" txt npy; then
  pass "$name"
fi

# --- .npy latents, float32 and float64: every rank reads its own share ---------------------------------
# (in tar shards of 4, so that every rank has a share)
shards4=(--formats tar,bmp --shard-images 4 --mosaic-tiles 2)
if /usr/bin/python3 -c "import numpy" 2> /dev/null; then
  /usr/bin/python3 - "$work/l64.txt" "$work/l64_f4.npy" "$work/l64_f8.npy" <<'PY'
import sys, numpy as np
values = np.loadtxt(sys.argv[1], skiprows=1, dtype=np.float64)
np.save(sys.argv[2], values.astype(np.float32))
np.save(sys.argv[3], values * 1.0000001)
PY
  for kind in f4 f8; do
    "$prog" --device cpu --model "$model" --input "$work/l64_$kind.npy" --output "$work/ref_$kind" "${shards4[@]}" --quiet ||
      { fail ".npy $kind single-process reference" "exit status $?"; continue; }
    for ranks in 1 2 3 5; do
      name="$ranks rank(s), .npy $kind input, pieces of 5: identical to one process"
      if parallel "$ranks" "$work/n${ranks}_$kind" "$work/l64_$kind.npy" --all-ranks --images-per-round 5 "${shards4[@]}" &&
         same_set "$name" "n${ranks}_$kind" "n${ranks}_$kind*" "ref_$kind*"; then
        pass "$name"
      else
        fail "$name" "$(head -c 400 "$work/stderr")"
      fi
    done
  done
else
  echo "  skip  .npy input: python3-numpy is not installed (make test-deps)"
fi

# --- drawn latents: every rank draws its own, as one process would ---------------------------------
"$prog" --device cpu --model "$model" --random 9 --seed 3 --output "$work/ref_random" "${shards4[@]}" --quiet
if timeout 60 ./run_parallel.sh --program "$prog" --model "$model" --random 9 --seed 3 --output "$work/random" \
     --ranks-per-node 3 -- --device cpu --all-ranks "${shards4[@]}" > "$work/stdout" 2> "$work/stderr" &&
   same_set "--random" random 'random*' 'ref_random*'; then
  pass "3 ranks, --random 9 --seed 3: identical to one process"
elif [ -s "$work/stderr" ]; then
  fail "3 ranks, --random 9" "$(head -c 400 "$work/stderr")"
fi

"$prog" --device cpu --model "$model" --interpolate 4 --seed 9 --output "$work/ref_interp" "${shards4[@]}" --quiet
if timeout 60 ./run_parallel.sh --program "$prog" --model "$model" --interpolate 4 --seed 9 --output "$work/interp" \
     --ranks-per-node 3 -- --device cpu --all-ranks --images-per-round 2 "${shards4[@]}" > "$work/stdout" 2> "$work/stderr" &&
   same_set "--interpolate" interp 'interp*' 'ref_interp*'; then
  pass "3 ranks, --interpolate 4 --seed 9, pieces of 2: identical to one process"
else
  fail "3 ranks, --interpolate 4" "$(head -c 400 "$work/stderr")"
fi

# --- drawn latents as recipes: each rank's backend draws its share itself ------------------------------
# FACEGEN_SYNTHETIC_RECIPES=1: the synthetic backend takes recipes, as the CUDA backend does on the GPU.
recipes=(--device synthetic --formats npy-u8,tar --shard-images 40)
for source in "--random 300 --seed 8" "--seeds 5-200,3,2,9000-9040 --truncation 0.6"; do  # tar: no seed twice
  read -r -a drawn_flags <<< "$source"
  name="3 ranks, $source, latents drawn by each rank's backend from recipes: identical to one process of host latents"
  rm -rf "$work/rref"* "$work/rgot"*
  if ! "$prog" "${drawn_flags[@]}" "${recipes[@]}" --quiet --output "$work/rref" 2> "$work/stderr"; then
    fail "$name" "one process: $(head -c 300 "$work/stderr")"
  elif ! FACEGEN_SYNTHETIC_RECIPES=1 timeout 60 ./run_parallel.sh --program "$prog" "${drawn_flags[@]}" --output "$work/rgot" \
       --ranks-per-node 3 -- "${recipes[@]}" --images-per-round 16 --all-ranks > "$work/stdout" 2> "$work/stderr"; then
    fail "$name" "3 ranks: $(head -c 300 "$work/stderr")"
  elif ! grep -q "^backend .*drawing latents from recipes" "$work/stdout"; then
    fail "$name" "the ranks did not take recipes: $(grep '^backend' "$work/stdout")"
  elif same_set "$name" rgot 'rgot*' 'rref*'; then
    pass "$name"
  fi
done

# --- a pipe is read in order only: rank 0 makes everything -------------------------------------------
"$prog" --device cpu --model "$model" --input "$work/l64.txt" --output "$work/ref_pipe" "${shards4[@]}" --quiet
mkfifo "$work/fifo"
cat "$work/l64.txt" > "$work/fifo" &
writer=$!
if parallel 3 "$work/fifo_out" "$work/fifo" --all-ranks --images-per-round 5 "${shards4[@]}" &&
   same_set "a pipe" fifo_out 'fifo_out*' 'ref_pipe*' &&
   grep -q "^ranks     3 on 1 host; 1 generates, 2 sit out (the job has 1 block)" "$work/stdout"; then
  pass "3 ranks, latents from a named pipe (rank 0 reads and makes all): identical to one process"
else
  fail "3 ranks, latents from a named pipe" "$(grep '^ranks' "$work/stdout") $(head -c 400 "$work/stderr")"
fi
kill "$writer" 2> /dev/null  # still blocked in open() if the job never read the pipe
wait_pid "$writer" 10 2> /dev/null

# --- small jobs leave ranks out -----------------------------------------------------------------
one_each=(--formats tar --shard-images 1)
"$prog" --device cpu --model "$model" --input "$work/l7.txt" --output "$work/ref7s" "${one_each[@]}" --quiet
if parallel 5 "$work/s7" "$work/l7.txt" --verbose "${one_each[@]}" && same_set "sit out" s7 's7*' 'ref7s*'; then
  if grep -q "^ranks     5 on 1 host; 1 generates, 4 sit out (a rank needs 8 images" "$work/stdout" &&
     [ "$(grep -c 'sits out' "$work/stdout")" = 4 ]; then
    pass "N=7 on 5 ranks: 4 ranks sit out by default (CPU: 8 images per rank), output identical"
  else
    fail "N=7 on 5 ranks sit out" "summary: $(cat "$work/stdout")"
  fi
else
  fail "N=7 on 5 ranks sit out" "exit status or output: $(head -c 400 "$work/stderr")"
fi
if parallel 5 "$work/m7" "$work/l7.txt" --min-images-per-rank 3 "${one_each[@]}" && same_set "min 3" m7 'm7*' 'ref7s*' &&
   grep -q "^ranks     5 on 1 host; 2 generate, 3 sit out" "$work/stdout"; then
  pass "N=7 on 5 ranks with --min-images-per-rank 3: 2 generate"
else
  fail "--min-images-per-rank 3" "$(grep '^ranks' "$work/stdout") $(head -c 300 "$work/stderr")"
fi

# --- failures end the whole job quickly and leave nothing ----------------------------------------
# expect_failure NAME STATUS-PATTERN LINE-PATTERN RANKS INPUT [facegen flags]: the job must exit with
# a status matching STATUS-PATTERN within 20 s, print exactly one "facegen: error on rank" line
# matching LINE-PATTERN, leave no file but the existing keep.txt, and leave keep.txt untouched.
expect_failure() {
  local name=$1 status_pattern=$2 line_pattern=$3 ranks=$4 input=$5
  shift 5
  rm -rf "$work/out" && mkdir -p "$work/out"
  earlier_output txt "old contents" > "$work/out/keep.txt"
  local start=$SECONDS
  parallel "$ranks" "$work/out/keep" "$input" "$@"
  local got=$? took=$((SECONDS - start))
  local lines
  lines=$(grep -c '^facegen: error on rank' "$work/stderr")
  if ! [[ $got =~ ^($status_pattern)$ ]]; then
    fail "$name" "exit status $got, expected $status_pattern; stderr: $(head -c 400 "$work/stderr")"
  elif [ "$lines" != 1 ] || ! grep -qE "$line_pattern" "$work/stderr"; then
    fail "$name" "expected one line matching '$line_pattern'; stderr: $(head -c 600 "$work/stderr")"
  elif [ "$took" -gt 20 ]; then
    fail "$name" "took $took s"
  elif [ -n "$(no_outputs "$work/out")" ]; then
    fail "$name" "left files behind: $(no_outputs "$work/out")"
  elif ! cmp -s "$work/out/keep.txt" <(earlier_output txt "old contents"); then
    fail "$name" "the existing output was changed"
  else
    pass "$name (${took} s): $(grep '^facegen: error on rank' "$work/stderr")"
  fi
}
host=$(hostname -s)
FACEGEN_TEST_FAULT=2:error expect_failure "rank 2 of 3 fails" 3 "^facegen: error on rank 2 \(host [^)]+\): injected fault" \
  3 "$work/l64.txt" --all-ranks "${shards4[@]}"
FACEGEN_TEST_FAULT=1:kill expect_failure "rank 1 of 3 is killed" "1[0-9][0-9]|[1-9]" \
  "^facegen: error on rank 1 \(host [^)]+\): the process died of signal 9" 3 "$work/l64.txt" --all-ranks "${shards4[@]}"
FACEGEN_TEST_FAULT=0:exit expect_failure "rank 0 of 2 (which commits the files) dies without a word" "[1-9][0-9]*" \
  "^facegen: error on rank 0 \(host $host\): the process ended with status 3 without a message" 2 "$work/l64.txt" --all-ranks \
  "${shards4[@]}"
FACEGEN_TEST_FAULT=0:kill expect_failure "rank 0 of 3 is killed" "1[0-9][0-9]|[1-9]" \
  "^facegen: error on rank 0 \(host [^)]+\): the process died of signal 9" 3 "$work/l64.txt" --all-ranks "${shards4[@]}"

# A rename of the output set fails on rank 0: the old outputs all come back, nothing is left.
rm -rf "$work/set" && mkdir -p "$work/set"
for f in r.txt r.bmp r.npy; do earlier_output "${f##*.}" "old $f" > "$work/set/$f"; done
FACEGEN_TEST_FAIL_RENAME=3 parallel 2 "$work/set/r" "$work/l7.txt" --all-ranks --formats txt,bmp,npy
got=$?
if [ "$got" = 1 ] && grep -q "the old outputs are back in place" "$work/stderr" &&
   [ "$(ls -A "$work/set" | tr '\n' ' ')" = "r.bmp r.npy r.txt " ] && cmp -s "$work/set/r.txt" <(earlier_output txt "old r.txt") &&
   cmp -s "$work/set/r.bmp" <(earlier_output bmp "old r.bmp") && cmp -s "$work/set/r.npy" <(earlier_output npy "old r.npy"); then
  pass "2 ranks, the last rename of txt,bmp,npy fails: every old output back, nothing left"
else
  fail "2 ranks, a failed rename" "status $got, entries $(ls -A "$work/set" | tr '\n' ' '): $(head -c 300 "$work/stderr")"
fi

# Bad input in the middle of the file: the same message as one process gives, from the rank that
# reads it (each rank reads its own share: 16 shards of 4 over 3 ranks, images 40-63 are rank 2's).
sed '$ s/^\([^ ]* [^ ]* \)[^ ]*/\1oops/' "$work/l64.txt" > "$work/bad.txt"
expected=$("$prog" --device cpu --model "$model" --input "$work/bad.txt" --output "$work/never" 2>&1 | sed 's/^facegen: error: //')
expect_failure "a bad number in the last image, after the ranks wrote their first files" 1 "^facegen: error on rank 2 \(host [^)]+\): $(printf '%s' "$expected" | sed 's/[][\.*^$(){}?+|/]/\\&/g')$" \
  3 "$work/bad.txt" --all-ranks --images-per-round 4 "${shards4[@]}"
# Two bad numbers, in rank 1's share (image 25) and rank 2's (image 63): the first in the file is the one reported.
sed '27 s/^\([^ ]* \)[^ ]*/\1nan/; $ s/^[^ ]*/oops/' "$work/l64.txt" > "$work/bad2.txt"
expected=$("$prog" --device cpu --model "$model" --input "$work/bad2.txt" --output "$work/never" 2>&1 | sed 's/^facegen: error: //')
expect_failure "two bad numbers in two ranks' shares: the first in the file" 1 "^facegen: error on rank 1 \(host [^)]+\): $(printf '%s' "$expected" | sed 's/[][\.*^$(){}?+|/]/\\&/g')$" \
  3 "$work/bad2.txt" --all-ranks --images-per-round 4 "${shards4[@]}"
# An output directory that does not exist.
rm -rf "$work/out" && mkdir -p "$work/out"
if parallel 2 "$work/out/missing/x" "$work/l7.txt" --all-ranks; then
  fail "missing output directory" "the job succeeded"
elif [ "$?" = 1 ] && grep -q "^facegen: error on rank 0 (host [^)]*): cannot create output file $work/out/missing/x.txt" "$work/stderr" &&
     [ -z "$(ls -A "$work/out")" ]; then
  pass "missing output directory: $(grep '^facegen: error' "$work/stderr")"
else
  fail "missing output directory" "$(head -c 400 "$work/stderr")"
fi

# --- hosts ---------------------------------------------------------------------------------------
printf 'localhost\nlocalhost  # the same machine twice is one node\n' > "$work/hostfile"
if timeout 60 ./run_parallel.sh --program "$prog" --model "$model" --input "$work/l64.txt" --output "$work/h64" \
     --ranks-per-node 2 --hosts "$work/hostfile" -- --device cpu --all-ranks > "$work/stdout" 2> "$work/stderr" &&
   same_files "hostfile" "$work/h64" "$work/ref64" txt bmp && grep -q '^ranks     2 on 1 host' "$work/stdout"; then
  pass "a hostfile naming localhost twice: 2 ranks on 1 node, identical"
else
  fail "hostfile naming localhost twice" "$(head -c 400 "$work/stderr") $(grep '^ranks' "$work/stdout")"
fi

# --- srun without MPI wiring is refused, not run N times over the same files ---------------------
SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 "$prog" --device cpu --model "$model" --input "$work/l1.txt" \
  --output "$work/srun" > "$work/stdout" 2> "$work/stderr"
got=$?
if [ "$got" = 2 ] && grep -q "srun --mpi=pmix" "$work/stderr" && ! [ -e "$work/srun.txt" ]; then
  pass "two srun tasks without MPI: refused ($(cat "$work/stderr"))"
else
  fail "srun without MPI" "status $got: $(cat "$work/stderr")"
fi

suite_end
