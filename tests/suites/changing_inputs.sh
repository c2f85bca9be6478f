#!/usr/bin/env bash
# changing_inputs.sh: inputs that change while a run reads them, in one process and over 2 MPI ranks.
#
# A run opens the latent file and the model once and reads them through that descriptor
# (latents/input_file.hpp). For the text and the .npy latent file, and for the model, each of
#   deleted, replaced by rename with a file of the same size   the run goes on with the file it opened:
#                                                             exit 0, outputs byte-identical to a run
#                                                             on an untouched copy
#   truncated, grown, overwritten in place with the same size exit 1, one line "... changed while it was
#                                                             read (N bytes when opened, M now)" or
#                                                             "... rewritten in place ...", no output,
#                                                             the old output byte-identical, no temporary
# at these moments:
#   one process: the latent file just opened (no byte read yet) and after its first images were read;
#     the model just opened; the model once loaded and checked (a change then no longer touches the run)
#   2 ranks: the latent file after every rank read its first slice; between rank 0's open and rank 1's
#     (rank 1 opens the file changed in place: "... changed between ranks' opens: rank 1 on host H sees
#     ...", or the file renamed over it: "... opened here is not rank 0's (host H): the same N bytes but
#     other contents (...)", exit 1;
#     a deleted latent file leaves the reading to rank 0, which still holds it: exit 0, identical);
#     the model between rank 0's open and rank 1's (deleted: rank 1 cannot open it, exit 1)
# and a latent of 3.4e38 (not the first image): exit 1, one line naming the latent, in one process and
# over 2 ranks.
#
# The moments come from FACEGEN_TEST_STOP (latents/input_file.hpp): the process stops itself with SIGSTOP
# at the named point; the suite waits (20 s at most) until /proc/PID/status says it is stopped, changes
# the file and continues it with SIGCONT. Every run has a deadline. Usage: changing_inputs.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh changing_inputs
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
for f in "$prog" "$model" "$build/make-latents" "$build/make-random-network"; do
  [ -e "$f" ] || { echo "changing_inputs: $f is missing (run make)"; exit 1; }
done
unset FACEGEN_TEST_STOP FACEGEN_TEST_FAULT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d /tmp/facegen-changing.XXXXXX)
run_pid=
cleanup() {
  [ -n "$run_pid" ] && kill -9 "$run_pid" 2> /dev/null
  rm -rf "$work"
}
on_exit cleanup

# --- inputs ------------------------------------------------------------------------------------------
# 64 latents: 4 pieces of 16 in one process, 2 shares of 32 over 2 ranks read in pieces of 8, so that
# reading goes on after the first images; the synthetic backend (images from the latents, no network) keeps each
# run well under a second. Every input has a twin of the same size and other values.
deadline 60 "$build/make-latents" --count 64 --seed 7 --output "$work/l.txt" > /dev/null || exit 1
{ head -n 1 "$work/l.txt"; tail -n +2 "$work/l.txt" | tr '1-8' '2-9'; } > "$work/l-twin.txt"
deadline 60 "$build/make-latents" --count 4 --seed 8 --output "$work/l4.txt" > /dev/null || exit 1
to_npy() {  # to_npy TEXT NPY: the text file's latents as a float32 .npy of shape (N, 100)
  /usr/bin/python3 - "$1" "$2" <<'PY'
import struct, sys
tokens = open(sys.argv[1]).read().split()
n, values = int(tokens[0]), [float(t) for t in tokens[1:]]
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 100), }" % n
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(sys.argv[2], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % len(values), *values))
PY
}
to_npy "$work/l.txt" "$work/l.npy" && to_npy "$work/l-twin.txt" "$work/l-twin.npy" || exit 1
cp "$model" "$work/m.bin"
deadline 60 "$build/make-random-network" --seed 2 --output "$work/m-twin.bin" > /dev/null || exit 1
for f in l m; do
  for ext in txt npy bin; do
    [ -e "$work/$f.$ext" ] || continue
    [ "$(stat -c %s "$work/$f.$ext")" = "$(stat -c %s "$work/$f-twin.$ext")" ] ||
      { echo "changing_inputs: $f-twin.$ext is not the size of $f.$ext"; exit 1; }
  done
done

synth=(--device synthetic --chunk 16 -q)
cpu=(--device cpu -q)
# References: each input untouched (a copy, so that the suite's changes never reach them).
reference() {  # reference NAME facegen-args...: $work/ref-NAME.{txt,bmp}
  local name=$1
  shift
  deadline 60 "$prog" "$@" --output "$work/ref-$name" 2> "$work/stderr" ||
    { echo "changing_inputs: the reference run $name failed: $(head -c 300 "$work/stderr")"; exit 1; }
}
cp "$work/l.txt" "$work/keep.txt" && cp "$work/l.npy" "$work/keep.npy" && cp "$work/m.bin" "$work/keep.bin"
reference txt "${synth[@]}" --input "$work/keep.txt"
reference npy "${synth[@]}" --input "$work/keep.npy"
# Two ranks split a job at its files' edges: tar shards and mosaic files of 16 images, so that each
# rank reads and writes its own share (an output of one file, txt, would be one rank's).
split=(--formats tar,bmp --shard-images 16 --mosaic-tiles 4)
reference txt2 "${synth[@]}" --input "$work/keep.txt" "${split[@]}"
reference npy2 "${synth[@]}" --input "$work/keep.npy" "${split[@]}"
reference model "${cpu[@]}" --model "$work/keep.bin" --input "$work/l4.txt"
rm -f "$work/keep.txt" "$work/keep.npy" "$work/keep.bin"

# fresh FILE: FILE as it was before any case changed it.
fresh() {
  case $1 in
    *.txt) cp "$work/l.txt" "$work/in.txt" ;;
    *.npy) cp "$work/l.npy" "$work/in.npy" ;;
    *.bin) cp "$work/m.bin" "$work/in.bin" ;;
  esac
}
# change HOW FILE: the change a case makes to FILE; its twin (same size, other bytes) is FILE's -twin.
change() {
  local how=$1 file=$2 twin
  twin=$(echo "$2" | sed 's|/in\.\(txt\)$|/l-twin.\1|; s|/in\.\(npy\)$|/l-twin.\1|; s|/in\.bin$|/m-twin.bin|')
  case $how in
    deleted) rm -f "$file" ;;
    renamed) cp "$twin" "$file.new" && mv "$file.new" "$file" ;;
    truncated) truncate -s $(($(stat -c %s "$file") / 2)) "$file" ;;
    grown) printf '0.5\n' >> "$file" ;;
    rewritten) dd if="$twin" of="$file" conv=notrunc status=none ;;
  esac
}

# wait_stopped PID...: until every PID has stopped itself (State: T), 20 s at most.
wait_stopped() {
  local tries=0 pid all
  while [ $tries -lt 400 ]; do
    all=yes
    for pid in "$@"; do
      stopped "$pid" || all=no
    done
    [ $all = yes ] && return 0
    nap 0.05
    tries=$((tries + 1))
  done
  return 1
}

# rank_pids JOB: the pids of the facegen ranks below JOB, once there are 2 of them (20 s at most).
rank_pids() {
  local tries=0 pids pid comm found
  while [ $tries -lt 400 ]; do
    pids=
    for pid in $(descendant_pids "$1"); do
      comm=
      read -r comm < "/proc/$pid/comm" 2> /dev/null
      [ "$comm" = facegen ] && pids="$pids $pid"
    done
    found=($pids)
    [ ${#found[@]} = 2 ] && { echo $pids; return 0; }
    kill -0 "$1" 2> /dev/null || return 1
    nap 0.05
    tries=$((tries + 1))
  done
  return 1
}

# made REF: the files a run compared with $work/ref-REF's makes: r.txt and r.bmp, or (REF ending in 2,
# the split runs) tar shards and numbered mosaics.
made() {
  case $1 in
    *2) (cd "$work" && ls -d "ref-$1"-* | sed "s/^ref-$1/r/") ;;
    *) printf 'r.txt\nr.bmp\n' ;;
  esac
}

same_as_ref() {  # same_as_ref REF: every file made equals $work/ref-REF's
  local file
  for file in $(made "$1"); do cmp -s "$work/out/$file" "$work/ref-$1${file#r}" || return 1; done
}
any_made() {  # any_made REF: whether one of the files made is there (but the old r.txt, checked apart)
  local file
  for file in $(made "$1"); do [ "$file" != r.txt ] && [ -e "$work/out/$file" ] && return 0; done
  return 1
}

# check NAME STATUS WANT PATTERN REF: the run's end. WANT 0: empty stderr, the files made (made REF)
# equal $work/ref-REF's; WANT 1: exactly one line from facegen, matching PATTERN, the old r.txt as it
# was, none of the files made. Either way no temporary file.
check() {
  local name=$1 got=$2 want=$3 pattern=$4 ref=$5 temps lines
  temps=$(ls -A "$work/out" | grep -E '\.tmp-' | head -n 3 | tr '\n' ' ')
  lines=$(grep -c '^facegen' "$work/stderr")
  if [ "$got" != "$want" ]; then
    fail "$name" "exit status $got, expected $want: $(head -c 400 "$work/stderr")"
  elif [ -n "$temps" ]; then
    fail "$name" "temporary files left: $temps"
  elif [ "$want" = 0 ]; then
    if [ -n "$(grep -v '^run_parallel:' "$work/stderr")" ]; then
      fail "$name" "it said something: $(head -c 400 "$work/stderr")"
    elif ! same_as_ref "$ref"; then
      fail "$name" "the outputs differ from a run on an untouched copy"
    else
      pass "$name: exit 0, outputs identical to a run on an untouched copy"
    fi
  elif [ "$lines" != 1 ] || ! grep -qE -- "$pattern" "$work/stderr"; then
    fail "$name" "not one line matching '$pattern': $(head -c 400 "$work/stderr")"
  elif ! cmp -s "$work/out/r.txt" <(earlier_output txt "old contents") || any_made "$ref"; then
    fail "$name" "the outputs were touched: $(ls -A "$work/out" | tr '\n' ' ')"
  else
    pass "$name: $(grep '^facegen' "$work/stderr")"
  fi
}

# changed_line HOW FILE: the sentence (a regular expression) that a change HOW to FILE in place gives.
changed_line() {
  local what=latent
  case $2 in *.bin) what=model ;; esac
  case $1 in
    truncated|grown) echo "$what file $2 changed while it was read \([0-9,]+ bytes when opened, [0-9,]+ now\)$" ;;
    rewritten) echo "$what file $2 changed while it was read \([0-9,]+ bytes when opened and now, but rewritten in place: its modification time moved [0-9.]+ s\)$" ;;
  esac
}

# finish_run NAME PIDS... : after the change, continue the stopped PIDS and wait for the run ($run_pid)
# to end (60 s at most); then check it against WANT, PATTERN and REF ($want $pattern $ref).
finish_run() {
  local name=$1 got
  shift
  kill -CONT "$@" 2> /dev/null
  timeout 60 tail -s 0.05 --pid="$run_pid" -f /dev/null || kill -9 "$run_pid" 2> /dev/null
  wait "$run_pid"
  got=$?
  run_pid=
  check "$name" $got "$want" "$pattern" "$ref"
}

# A new output folder holding an old r.txt, which a failed run must leave as it is.
fresh_out() {
  rm -rf "$work/out" && mkdir -p "$work/out" && earlier_output txt "old contents" > "$work/out/r.txt"
}

# one_process NAME POINT HOW FILE REF facegen-args...: one process stopped at POINT, FILE changed HOW.
one_process() {
  local name=$1 point=$2 how=$3 file=$4
  ref=$5
  shift 5
  fresh_out
  want=1
  pattern="^facegen: error: $(changed_line "$how" "$file")"
  case $how in deleted|renamed) want=0 ;; esac
  [ "$point" = loaded ] && want=0  # the model was read whole and checked before the latents' open
  local stop=$point
  [ "$point" = loaded ] && stop=latents-opened
  FACEGEN_TEST_STOP=0:$stop env --default-signal "$prog" "$@" --output "$work/out/r" > /dev/null 2> "$work/stderr" &
  run_pid=$!
  if ! wait_stopped $run_pid; then
    kill -9 $run_pid 2> /dev/null; wait $run_pid; run_pid=
    fail "$name" "the run did not stop at $stop: $(head -c 300 "$work/stderr")"
    return
  fi
  change "$how" "$file"
  finish_run "$name" $run_pid
}

# two_ranks NAME STOPS HOW FILE WANT PATTERN REF run_parallel-args... -- facegen-args...: 2 ranks
# stopped at STOPS (FACEGEN_TEST_STOP's value), FILE changed HOW once they are stopped.
two_ranks() {
  local name=$1 stops=$2 how=$3 file=$4 pids stopped pid
  want=$5
  pattern=$6
  ref=$7
  shift 7
  fresh_out
  FACEGEN_TEST_STOP=$stops env --default-signal timeout 120 ./run_parallel.sh --program "$prog" \
    --ranks-per-node 2 --output "$work/out/r" "$@" --all-ranks > /dev/null 2> "$work/stderr" &
  run_pid=$!
  # Only the ranks that STOPS names stop; the other, if any, goes on to wait for them.
  stopped=
  if pids=$(rank_pids $run_pid); then
    for pid in $pids; do
      tr '\0' '\n' < "/proc/$pid/environ" 2> /dev/null | grep -qE "^OMPI_COMM_WORLD_RANK=($(echo "$stops" | sed 's/:[^,]*//g; s/,/|/g'))$" &&
        stopped="$stopped $pid"
    done
  fi
  if [ -z "$stopped" ] || ! wait_stopped $stopped; then
    kill -9 $run_pid $pids 2> /dev/null; wait $run_pid; run_pid=
    fail "$name" "the ranks did not stop at $stops: $(head -c 300 "$work/stderr")"
    return
  fi
  change "$how" "$file"
  finish_run "$name" $stopped
}

echo "changing_inputs:"

# --- one process ---------------------------------------------------------------------------------------
for ext in txt npy; do
  for point in latents-opened latents-read; do
    for how in deleted renamed truncated grown rewritten; do
      fresh "in.$ext"
      one_process "one process, .$ext latent file $how at $point" $point $how "$work/in.$ext" $ext \
        "${synth[@]}" --input "$work/in.$ext"
    done
  done
done
for point in model-opened loaded; do
  for how in deleted renamed truncated grown rewritten; do
    fresh in.bin
    what="model $how at $point"
    [ $point = loaded ] && what="model $how once loaded and checked"
    one_process "one process, $what" $point $how "$work/in.bin" model "${cpu[@]}" --model "$work/in.bin" \
      --input "$work/l4.txt"
  done
done

# --- 2 ranks -------------------------------------------------------------------------------------------
if ! command -v mpirun > /dev/null || ! ldd "$prog" | grep -q libmpi; then
  skip "2 ranks: mpirun is missing or $prog was built without MPI"
else
  rank_line="^facegen: error on rank [01] \(host [^)]+\): "
  for ext in txt npy; do
    # Mid-run: every rank has opened the file and read its first piece of 8; 3 more to read.
    for how in deleted renamed truncated grown rewritten; do
      fresh "in.$ext"
      want=1
      case $how in deleted|renamed) want=0 ;; esac
      two_ranks "2 ranks, .$ext latent file $how after each read its first piece" 0:latents-read,1:latents-read \
        $how "$work/in.$ext" $want "$rank_line$(changed_line $how "$work/in.$ext")" ${ext}2 \
        --input "$work/in.$ext" -- --device synthetic --images-per-round 8 "${split[@]}" -q
    done
    # Between rank 0's open and rank 1's: rank 1 opens what is there then.
    for how in deleted renamed truncated grown rewritten; do
      fresh "in.$ext"
      want=1
      [ $how = deleted ] && want=0
      two_ranks "2 ranks, .$ext latent file $how between rank 0's open and rank 1's" 1:latents-open \
        $how "$work/in.$ext" $want \
        "${rank_line}(the latent file $work/in\.$ext (changed between ranks' opens: rank 1 on host [^ ]+ sees .*, rank 0 .*|opened here is not rank 0's \(host [^)]+\): .*)|$(changed_line truncated "$work/in.$ext"))" \
        ${ext}2 --input "$work/in.$ext" -- --device synthetic --images-per-round 8 "${split[@]}" -q
    done
  done
  for how in deleted renamed truncated grown rewritten; do
    fresh in.bin
    pattern="${rank_line}(the model file $work/in\.bin (changed between ranks' opens: rank 1 on host [^ ]+ sees .*, rank 0 .*|opened here is not rank 0's \(host [^)]+\): .*)|model file $work/in\.bin changed while it was read \(.*\))$"
    [ $how = deleted ] && pattern="^facegen: error on rank 1 \(host [^)]+\): cannot open model file $work/in\.bin: No such file or directory$"
    two_ranks "2 ranks, model $how between rank 0's open and rank 1's" 0:model-opened,1:model-open $how \
      "$work/in.bin" 1 "$pattern" model --input "$work/l4.txt" --model "$work/in.bin" -- "${cpu[@]}"
  done
fi

# --- a latent of 3.4e38 --------------------------------------------------------------------------------
# Value 17 of image 3 (the fourth, not the first, which is traced anyway) through the shipped model: the
# latent is named, not the model.
awk 'NR == 5 { $17 = "3.4e38" } { print }' "$work/l4.txt" > "$work/huge.txt"
huge_line="latent 4 of the input \(image 3\), value 17 of 100, is 3\.4e\+38, far outside a Gaussian latent's range: it makes layer [a-z0-9]+'s output NaN or Inf, which the model avoids with the latent clamped to \[-16, 16\]$"
fresh_out
deadline 60 "$prog" --device cpu --input "$work/huge.txt" --output "$work/out/r" -q > /dev/null 2> "$work/stderr"
check "one process, a latent of 3.4e38" $? 1 "^facegen: error: $huge_line" none
if command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi; then
  fresh_out
  deadline 120 ./run_parallel.sh --program "$prog" --ranks-per-node 2 --input "$work/huge.txt" \
    --output "$work/out/r" -- --device cpu --all-ranks --formats tar --shard-images 2 -q > /dev/null 2> "$work/stderr"
  check "2 ranks, a latent of 3.4e38" $? 1 "^facegen: error on rank 1 \(host [^)]+\): $huge_line" none
fi

suite_end
