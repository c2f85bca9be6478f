#!/usr/bin/env bash
# resume.sh: --resume, a job of many files finished over runs that are killed (synthetic images).
#
#   SIGKILL, 1 process   6,000 images into tar shards of 200 (30 shards), killed by SIGKILL at 10 random moments (each
#                        within the time the shards still missing take) and run again with --resume each
#                        time; after every kill each shard under its final name is byte for byte the
#                        uninterrupted run's and each manifest line names a shard of its size; the last
#                        run finishes: every shard the uninterrupted run's, no temporary left
#   SIGKILL, 3 ranks     the same under mpirun with 3 ranks, every rank and mpirun killed at once; then
#                        finished by 2 ranks, and checked by 1 process: the same bytes whatever the ranks
#   only what is missing 3 shards removed: the summary says 27 kept, 3 made, and the kept ones are the
#                        same files (inodes) as before
#   another job          --seed 4, --truncation 2, --precision bf16, --random 6001: refused in one line naming what
#                        differs; every file as it was
#   a changed byte       one byte of a finished shard changed: that shard alone is made again
#   SIGTERM              exit 143; only finished shards and the manifest are left, no temporary
#   one at a time        a second --resume run while the first is stopped (SIGSTOP) mid-run: refused in
#                        one line by the prefix's lock, nothing changed; the first then finishes
#   png and npy-u8       a folder of PNGs and npy-u8 shards of 100, 900 images, killed 3 times and
#                        finished: the same bytes; one PNG removed: its group of 100 made again
#   png alone            a folder of 2,200 PNGs (groups of 1,000 and one of 200) killed once a group is
#                        recorded, finished by 2 ranks (1 process without MPI), which keep what was
#                        recorded and make the rest: the same bytes
#   refused              --resume with txt, with npy without --shard-images, with latents from a pipe:
#                        exit 1, one line naming the format or the input, nothing written
# The random moments come from $RANDOM seeded by RESUME_SEED (printed, so a failure reproduces). Every
# run starts with default signal dispositions and has a deadline. The tar job's size and device can be
# set, for the issue's own target on a GPU machine: RESUME_DEVICE=cuda RESUME_IMAGES=200000
# RESUME_SHARD_IMAGES=1000 (default synthetic, 6000, 200; RESUME_PRECISION, default fp32; at least 12
# shards). Usage: resume.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh resume
build=${1:-build}
prog=$(cd "$(dirname "$build/facegen")" && pwd)/facegen
[ -x "$prog" ] || { echo "resume: $build/facegen is missing (run make)"; exit 1; }
work=$(mktemp -d /tmp/facegen-resume.XXXXXX)
on_exit 'rm -rf "$work"'
seed=${RESUME_SEED:-$(( $(date +%s) % 100000 ))}
RANDOM=$seed
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

echo "--resume, kills at random moments (RESUME_SEED=$seed; tar: ${RESUME_DEVICE:-synthetic}, ${RESUME_IMAGES:-6000} images, shards of ${RESUME_SHARD_IMAGES:-200}):"
images=${RESUME_IMAGES:-6000}
shard_images=${RESUME_SHARD_IMAGES:-200}
job=(--device "${RESUME_DEVICE:-synthetic}" --precision "${RESUME_PRECISION:-fp32}" --random "$images" --seed 3
     --formats tar --shard-images "$shard_images")
shards=$(( (images + shard_images - 1) / shard_images ))
[ $shards -ge 12 ] || { echo "resume: RESUME_IMAGES / RESUME_SHARD_IMAGES gives $shards shards, fewer than 12"; exit 1; }
run() {  # run PREFIX [flags]: the job into PREFIX, 60 s at most; stdout and stderr in $work/out, $work/err
  local prefix=$1
  shift
  deadline 60 "$prog" "${job[@]}" --output "$prefix" "$@" > "$work/out" 2> "$work/err"
}
mkdir -p "$work/ref" "$work/one" "$work/ranks"
start=$(now_ms)
run "$work/ref/r" -q || { echo "resume: the uninterrupted run failed: $(cat "$work/err")"; exit 1; }
took=$(( $(now_ms) - start ))

# same_finished DIR: every shard under its final name in DIR is the uninterrupted run's, and every
# manifest line names a shard of DIR of its size; "" when so, else what is wrong.
same_finished() {
  local dir=$1 name
  for name in $(ls "$dir" | grep '^r-.*\.tar$'); do
    cmp -s "$dir/$name" "$work/ref/$name" || echo "$name differs"
  done
  cat "$dir"/r.facegen-resume* 2> /dev/null | awk '$1 == "unit" { print $4, $6 }' | while read -r bytes name; do
    [ "$(stat -c %s "$dir/$name" 2> /dev/null)" = "$bytes" ] || echo "the manifest's $name is not there with $bytes bytes"
  done
}
temporaries() { ls -A "$1" | grep -E '\.tmp-|^\.facegen-' | paste -sd' '; }
finished_count() { ls "$1" | grep -c '^r-.*\.tar$'; }

# kill_loop DIR KILLS LAUNCH...: KILLS times, LAUNCH (a command that starts the job in the background
# and sets $job_pid) and a SIGKILL after a random time within what the missing shards take; then
# checks the leftovers. Sets $interrupted (the runs the kill cut short) and $problem.
kill_loop() {
  local dir=$1 kills=$2 k delay missing status
  shift 2
  interrupted=0
  problem=
  for k in $(seq "$kills"); do
    missing=$((shards - $(finished_count "$dir")))
    delay=$(( 10 + RANDOM % (window_base + took * missing / shards + 1) ))
    "$@"
    sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
    kill_job
    { wait_pid "$job_pid" 30; } 2> /dev/null  # bash's own "Killed" line
    status=$?
    [ $status -eq 137 ] && interrupted=$((interrupted + 1))
    [ $status -eq 137 ] || [ $status -eq 0 ] || { problem="run $k: exit status $status: $(tail -n 2 "$work/err")"; return; }
    problem=$(same_finished "$dir" | head -n 3 | paste -sd';')
    [ -z "$problem" ] || { problem="after kill $k ($delay ms): $problem"; return; }
  done
}

# --- one process --------------------------------------------------------------------------------
start_one() {
  env --default-signal "$prog" "${job[@]}" --output "$work/one/r" --resume -q > "$work/out" 2> "$work/err" &
  job_pid=$!
}
kill_job() { kill -KILL "$job_pid" 2> /dev/null; }
window_base=0
case_start=$SECONDS
kill_loop "$work/one" 10 start_one
if [ -z "$problem" ]; then
  left_before=$(temporaries "$work/one")
  if ! run "$work/one/r" --resume; then
    problem="the last run failed: $(head -c 300 "$work/err")"
  else
    problem=$(same_finished "$work/one")
    [ "$(finished_count "$work/one")" = $shards ] || problem="$problem; $(finished_count "$work/one") shards"
    [ -z "$(temporaries "$work/one")" ] || problem="$problem; left: $(temporaries "$work/one")"
    summary=$(grep '^resumed' "$work/out")
  fi
fi
if [ -z "$problem" ]; then
  pass "1 process, $shards shards, SIGKILL at 10 random moments ($interrupted cut a run short; ${left_before:+the kills left temporaries, which the next run removed; }$((SECONDS - case_start)) s): every shard the uninterrupted run's; last run: ${summary#resumed   }"
else
  fail "1 process, SIGKILL at random moments" "$problem"
fi

# --- 3 ranks --------------------------------------------------------------------------------------
if ! command -v mpirun > /dev/null || ! ldd "$prog" | grep -q libmpi; then
  skip "3 ranks, SIGKILL at random moments: mpirun is missing or $prog was built without MPI"
else
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TMPDIR=$work
  ranks() {  # ranks COUNT DIR [flags]: the job on COUNT ranks, in the background; $job_pid is mpirun
    local count=$1 dir=$2
    shift 2
    env --default-signal mpirun -np "$count" --oversubscribe "$prog" "${job[@]}" --all-ranks --output "$dir/r" \
      --resume -q "$@" > "$work/out" 2> "$work/err" &
    job_pid=$!
  }
  start_ranks() { ranks 3 "$work/ranks"; }
  kill_job() {  # every rank and mpirun at once, as a lost node or the OOM killer would
    kill -KILL $(descendant_pids "$job_pid") "$job_pid" 2> /dev/null
  }
  mkdir -p "$work/mpi-ref"
  start=$(now_ms)
  ranks 3 "$work/mpi-ref"
  wait_pid "$job_pid" 60
  mpi_took=$(( $(now_ms) - start ))
  window_base=$((mpi_took - took))  # mpirun's and the ranks' start
  case_start=$SECONDS
  kill_loop "$work/ranks" 10 start_ranks
  if [ -z "$problem" ]; then
    ranks 2 "$work/ranks"
    wait_pid "$job_pid" 60 || problem="2 ranks after the kills: $(tail -n 3 "$work/err")"
  fi
  if [ -z "$problem" ]; then
    run "$work/ranks/r" --resume || problem="1 process after the ranks: $(tail -n 3 "$work/err")"
    problem=$problem$(same_finished "$work/ranks")
    [ "$(finished_count "$work/ranks")" = $shards ] || problem="$problem; $(finished_count "$work/ranks") shards"
    [ -z "$(temporaries "$work/ranks")" ] || problem="$problem; left: $(temporaries "$work/ranks")"
    grep -q "^resumed   kept $shards files that an earlier run finished, made 0;" "$work/out" ||
      problem="$problem; 1 process after the ranks: $(grep '^resumed' "$work/out")"
  fi
  if [ -z "$problem" ]; then
    pass "3 ranks, every rank and mpirun killed by SIGKILL at 10 random moments ($interrupted cut a run short), finished by 2 ranks, kept whole by 1 process ($((SECONDS - case_start)) s): every shard the uninterrupted run's"
  else
    fail "3 ranks, SIGKILL at random moments" "$problem"
  fi
fi

# --- a rerun makes only what is missing -----------------------------------------------------------
dir=$work/one
inodes() { for k in $(seq -f %06g 0 $((shards - 1))); do stat -c %i "$dir/r-$k.tar" 2> /dev/null; done | paste -sd' '; }
gone=(4 $((shards / 2 + 2)) $((shards - 1)))
for k in "${gone[@]}"; do rm -f "$dir/r-$(printf %06d "$k").tar"; done
before=$(inodes)
if run "$dir/r" --resume && grep -q "^resumed   kept $((shards - 3)) files that an earlier run finished, made 3; manifest" "$work/out" &&
   [ -z "$(same_finished "$dir")" ] && [ "$(finished_count "$dir")" = $shards ]; then
  after=$(inodes)
  lines=$(printf '%dd;' $((gone[0] + 1)) $((gone[1] + 1)) $((gone[2] + 1)))
  changed=$(diff <(tr ' ' '\n' <<< "$before" | grep -v '^$') <(tr ' ' '\n' <<< "$after" | sed "$lines") > /dev/null && echo no || echo yes)
  [ "$changed" = no ] && pass "3 shards removed: only those made again ($(grep '^resumed' "$work/out" | cut -c11-)); the $((shards - 3)) others are the same files" ||
    fail "3 shards removed" "a kept shard was written again (inodes before: $before; after: $after)"
else
  fail "3 shards removed" "$(grep '^resumed' "$work/out") $(head -c 300 "$work/err") $(same_finished "$dir")"
fi

# --- another job: refused, nothing changed --------------------------------------------------------
snapshot() { (cd "$dir" && ls -A --full-time | sed 1d && md5sum r-*.tar r.facegen-resume*); }
other_precision=$([ "${RESUME_PRECISION:-fp32}" = bf16 ] && echo tf32 || echo bf16)
for other in "s/--seed 3/--seed 4/|--seed was 3, this run's is 4" \
             "s/--seed 3/--seed 3 --truncation 2/|--truncation was -, this run's is 2" \
             "s/--precision [a-z0-9]*/--precision $other_precision/|--precision was ${RESUME_PRECISION:-fp32}, this run's is $other_precision" \
             "s/--random $images/--random $((images + 1))/|--random was $images, this run's is $((images + 1))"; do
  edit=${other%%|*} want=${other#*|}
  read -r -a flags <<< "$(sed "$edit" <<< "${job[*]}")"
  before=$(snapshot)
  deadline 60 "$prog" "${flags[@]}" --output "$dir/r" --resume > "$work/out" 2> "$work/err"
  status=$?
  if [ $status -eq 1 ] && [ "$(wc -l < "$work/err")" = 1 ] && grep -qF -- "$want" "$work/err" && [ "$(snapshot)" = "$before" ]; then
    pass "a rerun with ${want%% was*} changed: refused in one line, every file as it was: $(cut -c1-150 "$work/err")..."
  else
    fail "a rerun with ${want%% was*} changed" "exit status $status; $(head -c 400 "$work/err")"
  fi
done

# --- a byte changed in a finished shard: made again -----------------------------------------------
changed_shard=r-$(printf %06d $((shards / 3))).tar
offset=$(( $(stat -c %s "$dir/$changed_shard") / 2 ))
byte=$(od -An -tu1 -j "$offset" -N1 "$dir/$changed_shard" | tr -d ' ')
printf "\\x$(printf %02x $((byte ^ 1)))" | dd of="$dir/$changed_shard" bs=1 seek="$offset" conv=notrunc 2> /dev/null
if ! cmp -s "$dir/$changed_shard" "$work/ref/$changed_shard" && run "$dir/r" --resume &&
   grep -q "^resumed   kept $((shards - 1)) files that an earlier run finished, made 1;" "$work/out" && [ -z "$(same_finished "$dir")" ]; then
  pass "one byte of a finished shard changed: that shard alone made again ($(grep '^resumed' "$work/out" | cut -c11-))"
else
  fail "one byte of a finished shard changed" "$(grep '^resumed' "$work/out") $(head -c 300 "$work/err") $(same_finished "$dir")"
fi

# --- SIGTERM: no temporary ------------------------------------------------------------------------
mkdir -p "$work/term"
env --default-signal "$prog" "${job[@]}" --output "$work/term/r" --resume -q > "$work/out" 2> "$work/err" &
pid=$!
for _ in $(seq 600); do [ "$(finished_count "$work/term")" -ge 3 ] && break; sleep 0.005; done
kill -TERM "$pid"
wait_pid "$pid" 30
status=$?
made=$(finished_count "$work/term")
if [ $status -eq 143 ] && [ -z "$(temporaries "$work/term")" ] && [ -z "$(same_finished "$work/term")" ] && [ "$made" -ge 3 ]; then
  pass "SIGTERM after 3 shards: exit 143, $made finished shards and the manifest left, no temporary: $(cat "$work/err")"
else
  fail "SIGTERM mid-run" "exit status $status, $made shards; left: $(temporaries "$work/term") $(same_finished "$work/term")"
fi

# --- one run at a time: a second --resume run into the prefix is refused while the first runs ----------
mkdir -p "$work/lock"
env --default-signal "$prog" "${job[@]}" --output "$work/lock/r" --resume -q > "$work/out" 2> "$work/err" &
pid=$!
for _ in $(seq 1000); do grep -q '^unit ' "$work/lock/r.facegen-resume" 2> /dev/null && break; sleep 0.005; done
kill -STOP "$pid"
before=$(cd "$work/lock" && ls -A | paste -sd' ')
deadline 60 "$prog" "${job[@]}" --output "$work/lock/r" --resume > "$work/out2" 2> "$work/err2"
second=$?
after=$(cd "$work/lock" && ls -A | paste -sd' ')
kill -CONT "$pid"
wait_pid "$pid" 60
first=$?
if [ $second -eq 1 ] && [ "$(wc -l < "$work/err2")" = 1 ] && grep -q 'facegen runs one at a time into a prefix' "$work/err2" &&
   [ "$before" = "$after" ] && [ $first -eq 0 ] && [ "$(finished_count "$work/lock")" = $shards ] && [ -z "$(same_finished "$work/lock")" ]; then
  pass "a second --resume run while the first runs: refused in one line, nothing changed; the first finishes: $(cut -c1-120 "$work/err2")..."
else
  fail "a second --resume run while the first runs" "second: exit $second, $(head -c 200 "$work/err2"); first: exit $first; before: $before; after: $after"
fi

# --- a folder of PNGs and npy-u8 shards -----------------------------------------------------------
job=(--device synthetic --random 900 --seed 5 --formats png,npy-u8 --shard-images 100)
shards=9
mkdir -p "$work/pref" "$work/png"
start=$(now_ms)
run "$work/pref/r" -q || fail "png and npy-u8" "the uninterrupted run failed: $(cat "$work/err")"
took=$(( $(now_ms) - start ))
finished_count() { ls "$1" | grep -c '^r-.*\.u8\.npy$'; }
same_finished() {
  local dir=$1 name
  for name in $(ls "$dir" | grep '^r-.*\.u8\.npy$'); do cmp -s "$dir/$name" "$work/pref/$name" || echo "$name differs"; done
  for name in $(ls "$dir/r" 2> /dev/null); do cmp -s "$dir/r/$name" "$work/pref/r/$name" || echo "r/$name differs"; done
}
start_png() {
  env --default-signal "$prog" "${job[@]}" --output "$work/png/r" --resume -q > "$work/out" 2> "$work/err" &
  job_pid=$!
}
kill_job() { kill -KILL "$job_pid" 2> /dev/null; }
window_base=0
kill_loop "$work/png" 3 start_png
if [ -z "$problem" ]; then
  if ! run "$work/png/r" --resume; then
    problem="the last run failed: $(head -c 300 "$work/err")"
  elif ! diff -r "$work/png/r" "$work/pref/r" > /dev/null || [ -n "$(same_finished "$work/png")" ] ||
       [ "$(finished_count "$work/png")" != $shards ] || [ -n "$(temporaries "$work/png")" ]; then
    problem="not the uninterrupted run's files: $(diff -rq "$work/png/r" "$work/pref/r" | head -n 2) $(same_finished "$work/png") $(temporaries "$work/png")"
  else
    rm "$work/png/r/000432.png"
    run "$work/png/r" --resume
    grep -q "^resumed   kept 809 files that an earlier run finished, made 100;" "$work/out" && diff -r "$work/png/r" "$work/pref/r" > /dev/null ||
      problem="one PNG removed: $(grep '^resumed' "$work/out") $(head -c 200 "$work/err")"
  fi
fi
if [ -z "$problem" ]; then
  pass "a folder of 900 PNGs and npy-u8 shards of 100, SIGKILL at 3 random moments ($interrupted cut a run short): the uninterrupted run's files; one PNG removed: its group of 100 alone made again"
else
  fail "png and npy-u8, SIGKILL at random moments" "$problem"
fi

# --- a folder of PNGs alone: groups of 1,000 -------------------------------------------------------
job=(--device synthetic --random 2200 --seed 6 --formats png)
mkdir -p "$work/gref" "$work/groups"
problem=
run "$work/gref/r" -q || problem="the uninterrupted run failed: $(cat "$work/err")"
env --default-signal "$prog" "${job[@]}" --output "$work/groups/r" --resume -q > "$work/out" 2> "$work/err" &
pid=$!
for _ in $(seq 2000); do grep -q '^unit png ' "$work/groups/r.facegen-resume" 2> /dev/null && break; sleep 0.005; done
kill -KILL "$pid"
{ wait_pid "$pid" 30; } 2> /dev/null
placed=$(ls "$work/groups/r" 2> /dev/null | wc -l)
if command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi; then
  finisher="2 ranks"
  deadline 60 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TMPDIR="$work" mpirun -np 2 --oversubscribe \
    "$prog" "${job[@]}" --all-ranks --output "$work/groups/r" --resume > "$work/out" 2> "$work/err" || problem="$problem the last run failed: $(head -c 300 "$work/err")"
else
  finisher="1 process"
  run "$work/groups/r" --resume || problem="$problem the last run failed: $(head -c 300 "$work/err")"
fi
lines=$(cat "$work/groups/r.facegen-resume"* | grep -c '^unit png [012] ')
kept=$(grep -o '^resumed   kept [0-9,]* files that an earlier run finished, made [0-9,]*' "$work/out" | tr -d , | awk '{ print $3, $11 }')
if [ -z "$problem" ] && diff -r "$work/groups/r" "$work/gref/r" > /dev/null && [ -z "$(temporaries "$work/groups")" ] &&
   [ "$lines" -ge 3 ] && cat "$work/groups/r.facegen-resume"* | grep -q '^unit png 0 .* r/000000.png ... r/000999.png$' &&
   [ -n "$kept" ] && [ "${kept% *}" -ge 200 ] && [ $(( ${kept% *} + ${kept#* } )) = 2200 ]; then
  pass "a folder of 2,200 PNGs alone, in groups of 1,000: killed once a group was recorded ($placed PNGs in place), finished by $finisher ($(grep '^resumed' "$work/out" | cut -c11- | cut -d';' -f1)): the uninterrupted run's files"
else
  fail "a folder of PNGs alone" "$problem $(diff -rq "$work/groups/r" "$work/gref/r" | head -n 2) $(temporaries "$work/groups") ($lines manifest lines; $(grep '^resumed' "$work/out"))"
fi

# --- refused ----------------------------------------------------------------------------------------
mkdir -p "$work/refused"
for refused in "--formats tar,txt|but txt is made as one output" "--formats npy|but npy without --shard-images is one file" \
               "--formats bmp,png|but bmp is made as one output"; do
  flags=${refused%%|*} want=${refused#*|}
  deadline 60 "$prog" --device synthetic --random 10 --output "$work/refused/r" --resume $flags > "$work/out" 2> "$work/err"
  status=$?
  if [ $status -eq 1 ] && [ "$(wc -l < "$work/err")" = 1 ] && grep -qF -- "$want" "$work/err" && [ -z "$(ls -A "$work/refused")" ]; then
    pass "--resume $flags: refused, one line, nothing written: $(cat "$work/err")"
  else
    fail "--resume $flags" "exit status $status; $(head -c 300 "$work/err"); left: $(ls -A "$work/refused")"
  fi
done
printf '2\n%s\n%s\n' "$(seq -s' ' 100 | sed 's/[0-9]*/0.1/g')" "$(seq -s' ' 100 | sed 's/[0-9]*/0.2/g')" |
  deadline 60 "$prog" --device synthetic --input /dev/stdin --output "$work/refused/r" --formats tar --resume > "$work/out" 2> "$work/err"
status=$?
if [ $status -eq 1 ] && [ "$(wc -l < "$work/err")" = 1 ] && grep -q 'read in order only (a pipe' "$work/err" &&
   [ -z "$(ls -A "$work/refused")" ]; then
  pass "--resume with latents from a pipe: refused, one line: $(cut -c1-160 "$work/err")..."
else
  fail "--resume with latents from a pipe" "exit status $status; $(head -c 300 "$work/err"); left: $(ls -A "$work/refused")"
fi

suite_end
