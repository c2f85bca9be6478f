#!/usr/bin/env bash
# launcher_ends.sh: run_parallel.sh never outlives its ranks, and its ranks never outlive it.
#
# A 3-rank CPU job on this machine (3,000 images, 64 a round, as a user's reproduction had it) is
# ended from outside at varied moments, every way an operator, a scheduler or the OOM killer would:
#   SIGKILL to mpirun, four times (as mpirun starts its ranks, and 0, 0.7 and 1.5 s into the work)
#   SIGTERM and SIGINT to mpirun
#   one rank killed (SIGKILL)
#   SIGKILL to mpirun with one rank (a stand-in) ignoring every signal but SIGKILL: a rank that does
#     not end by itself is ended by the launcher after its deadlines (FACEGEN_STOP_SECONDS=2)
#   SIGKILL to mpirun while rank 0 commits 2,001 outputs over an old set
#   SIGKILL to run_parallel.sh itself (its guard stops the job)
# After each, once run_parallel.sh has returned (or, for SIGKILL to the script, within 10 s): no
# process of the job is left (no rank, no mpirun), no lock (.facegen-lock-*), no temporary; the
# files facegen did not write (a note, another run's temporary of the same prefix, an earlier
# output) are byte for byte as they were; the job's status is non-zero, and a commit that had begun
# is complete (the new set whole) or had not begun (the old one whole); a killed mpirun's session
# directory (TMPDIR/ompi.HOST.UID/pid.PID) is gone.
# Usage: launcher_ends.sh [build-dir]; exit 0 pass, 77 skipped (says why), 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh launcher_ends
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "launcher_ends: $prog or $model is missing (run make)"; exit 1; }
command -v mpirun > /dev/null || skip_suite "mpirun is not installed (make deps)"
ldd "$prog" | grep -q libmpi || skip_suite "$prog was built without MPI"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FACEGEN_TEST_FAULT FACEGEN_TEST_STOP FACEGEN_STOP_SECONDS

work=$(mktemp -d /tmp/facegen-launcher-ends.XXXXXX)
job=
killed_mpirun=
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2> /dev/null
  local p
  for p in $(pgrep -f -- "--output $work/"); do kill -9 "$p" 2> /dev/null; done
  rm -rf "$work"
}
on_exit cleanup

# start_job DIR [flags]: run_parallel.sh on 3 ranks into DIR/r in the background ($job), with every
# signal at its default; DIR holds files facegen did not write, and an earlier output.
start_job() {
  local dir=$1
  shift
  rm -rf "$dir" && mkdir -p "$dir"
  echo "a note of the user's" > "$dir/notes.txt"
  echo "another run's temporary" > "$dir/r.txt.tmp-rp1h2r3-AbCdEf"
  earlier_output txt "old contents" > "$dir/r.txt"
  (cd "$dir" && sha256sum notes.txt r.txt.tmp-rp1h2r3-AbCdEf r.txt) > "$work/sums"
  env --default-signal ./run_parallel.sh --program "${program:-$prog}" --model "$model" --random 3000 --output "$dir/r" \
    --ranks-per-node 3 -- --device cpu --all-ranks --images-per-round 64 "$@" > "$work/stdout" 2> "$work/stderr" &
  job=$!
}

# job_pids DIR [all]: the processes of the job writing DIR/r: its ranks and mpirun (with "all", the
# launcher script and its guard too).
job_pids() {
  local p
  for p in $(pgrep -f -- "--output $1/r( |$)"); do
    case $(cat "/proc/$p/comm" 2> /dev/null) in
      facegen|mpirun|orterun|orted) echo "$p" ;;
      *) [ "${2:-}" = all ] && echo "$p" ;;
    esac
  done
}

# rank_pid DIR RANK: that rank's pid (from OMPI_COMM_WORLD_RANK in its environment).
rank_pid() {
  local p
  for p in $(pgrep -f -- "--output $1/r( |$)"); do
    [ "$(cat "/proc/$p/comm" 2> /dev/null)" = facegen ] &&
      tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return 0; }
  done
  return 1
}
mpirun_pid() {
  local p
  for p in $(pgrep -x mpirun); do
    tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | grep -q -- "--output $1/r " && { echo "$p"; return 0; }
  done
  return 1
}

# wait_for DIR WHAT SECONDS: until WHAT is true of the job: "working" (its temporaries exist),
# "ranks" (its three ranks run), "committing" (rank 0 has begun to put the outputs in place).
wait_for() {
  local dir=$1 what=$2 deadline=$((SECONDS + $3)) f
  while [ $SECONDS -lt $deadline ] && kill -0 "$job" 2> /dev/null; do
    case $what in
      working) for f in "$dir"/*.tmp-*; do [ -e "$f" ] && [[ $f != *rp1h2r3* ]] && return 0; done ;;
      ranks) [ "$(pgrep -f -- "--output $dir/r( |$)" | while read -r p; do cat "/proc/$p/comm" 2> /dev/null; done |
                 grep -cx facegen)" = 3 ] && return 0 ;;
      committing) compgen -G "$dir/.facegen-old-*" > /dev/null && return 0 ;;
    esac
    nap 0.02
  done
  return 1
}

# judge NAME DIR STATUS [commit]: what run_parallel.sh left at its return.
judge() {
  local name=$1 dir=$2 got=$3 commit=${4:-} left lock temps sizes
  left=$(job_pids "$dir")
  lock=$(ls -A "$dir" | grep '^\.facegen-lock-' || true)
  temps=$(ls -A "$dir" | grep -v 'rp1h2r3' | grep -E '\.tmp-|^\.facegen-(commit|old)-' | head -n 3 | tr '\n' ' ' || true)
  if [ -n "$killed_mpirun" ] && compgen -G "${TMPDIR:-/tmp}/ompi.*/pid.$killed_mpirun" > /dev/null; then
    fail "$name" "the killed mpirun's session directory is left: $(compgen -G "${TMPDIR:-/tmp}/ompi.*/pid.$killed_mpirun")"
  elif [ -n "$left" ]; then
    fail "$name" "status $got, but left running at its return: $(for p in $left; do echo "$p $(cat /proc/$p/comm)"; done | paste -sd,)"
    kill -9 $left 2> /dev/null
  elif [ "$got" = 0 ] || [ "$got" = 124 ]; then
    fail "$name" "exit status $got: $(tail -c 400 "$work/stderr")"
  elif [ -n "$lock" ]; then
    fail "$name" "the lock $lock is left: $(tail -c 400 "$work/stderr")"
  elif [ -n "$temps" ]; then
    fail "$name" "temporaries left: $temps$(tail -c 300 "$work/stderr")"
  elif [ -z "$commit" ] && ! (cd "$dir" && sha256sum --quiet -c "$work/sums" > /dev/null 2>&1); then
    fail "$name" "a file facegen did not write (or the earlier output) changed: $(ls -A "$dir" | tr '\n' ' ')"
  elif [ -n "$commit" ]; then
    sizes=$(stat -c %s "$dir"/r-*.bmp 2> /dev/null | sort | uniq -c | awk '{ print $1 " of " $2 " bytes" }')
    if [ "$sizes" != "2000 of 54190 bytes" ] && [ "$sizes" != "$old_sizes" ]; then
      fail "$name" "not one whole set of mosaic files: $sizes"
    elif [ -n "$(ls -A "$dir" | grep -vxE 'r-[0-9]{4}\.bmp|r\.txt|notes\.txt|r\.txt\.tmp-rp1h2r3-AbCdEf')" ]; then
      fail "$name" "entries left: $(ls -A "$dir" | grep -vxE 'r-[0-9]{4}\.bmp|r\.txt|notes\.txt' | head -n 3)"
    else
      local set=old
      [ "$sizes" = "2000 of 54190 bytes" ] && set=new
      pass "$name: exit $got, nothing running, the $set set whole, nothing left; $(grep '^run_parallel: .*' "$work/stderr" | tail -n 1)"
    fi
  else
    pass "$name: exit $got, nothing running, no lock, no temporary; $(grep '^run_parallel: mpirun ended before its job' "$work/stderr" | sed 's/.*; /the ranks: /' | head -n 1)"
  fi
}

echo "run_parallel.sh and its ranks end together:"

# --- SIGKILL to mpirun at several moments ----------------------------------------------------------
for moment in start 0 0.7 1.5; do
  dir=$work/kill-$moment
  start_job "$dir"
  name="SIGKILL to mpirun"
  if [ $moment = start ]; then
    wait_for "$dir" ranks 60; name="$name as it starts its ranks"
  else
    wait_for "$dir" working 60 && sleep $moment; name="$name $moment s into the work"
  fi
  if pid=$(mpirun_pid "$dir"); then
    kill -KILL "$pid"
    wait_pid "$job" 60
    killed_mpirun=$pid judge "$name" "$dir" $?
  else
    wait_pid "$job" 60
    fail "$name" "no mpirun found: $(tail -c 300 "$work/stderr")"
  fi
  job=
done

# --- SIGTERM and SIGINT to mpirun, one rank killed ---------------------------------------------------
for how in TERM INT rank; do
  dir=$work/$how
  start_job "$dir"
  if wait_for "$dir" working 60 && sleep 0.5; then
    if [ $how = rank ]; then
      name="rank 1 killed (SIGKILL)"
      kill -KILL "$(rank_pid "$dir" 1)"
    else
      name="SIG$how to mpirun"
      kill -$how "$(mpirun_pid "$dir")"
    fi
    wait_pid "$job" 60
    judge "$name" "$dir" $?
  else
    wait_pid "$job" 60
    fail "SIG$how to mpirun" "the job did not start: $(tail -c 300 "$work/stderr")"
  fi
  job=
done

# --- a rank that does not end by itself ------------------------------------------------------------
# facegen's ranks end within a second or two of mpirun's death whatever they ignore (their own
# watch; a write to the launcher's pipe; OpenMPI's PMIx client), so rank 1 is a stand-in that ignores
# every signal it can and waits (a rank hung in the kernel would not end either; a rank stopped with
# SIGSTOP is no such case: its process group, orphaned by mpirun's death, gets SIGHUP and SIGCONT).
# The launcher waits 2 s (settle), sends SIGTERM, waits FACEGEN_STOP_SECONDS (2), then SIGKILL.
printf '%s\n' '#!/usr/bin/env bash' \
  'if [ "${OMPI_COMM_WORLD_RANK:-}" = 1 ]; then trap "" TERM HUP INT PIPE QUIT USR1 USR2; sleep 313 & wait; fi' \
  "exec $prog \"\$@\"" > "$work/ignoring-rank"
chmod +x "$work/ignoring-rank"
dir=$work/stuck
program=$work/ignoring-rank FACEGEN_STOP_SECONDS=2 start_job "$dir"
name="SIGKILL to mpirun, rank 1 ignoring every signal but SIGKILL"
deadline=$((SECONDS + 60))
until [ -n "$(pgrep -f -x 'sleep 313')" ] && [ "$(job_pids "$dir" | wc -l)" = 3 ] || [ $SECONDS -ge $deadline ]; do sleep 0.05; done
if [ -n "$(pgrep -f -x 'sleep 313')" ] && pid=$(mpirun_pid "$dir"); then
  kill -KILL "$pid"
  start=$SECONDS
  wait_pid "$job" 60
  got=$?
  stray=$(pgrep -f -x 'sleep 313'; pgrep -f "$work/ignoring-rank")
  if ! grep -q "^run_parallel: mpirun ended before its job: on this host .*; killed (SIGKILL) 2 s after SIGTERM$" "$work/stderr"; then
    fail "$name" "no line saying the rank was killed after the deadlines: $(tail -c 400 "$work/stderr")"
  elif [ -n "$stray" ]; then
    fail "$name" "the stand-in rank is still running: $stray"
    kill -9 $stray
  else
    judge "$name (ended after $((SECONDS - start)) s)" "$dir" $got
  fi
else
  wait_pid "$job" 60
  fail "$name" "the job did not start: $(tail -c 300 "$work/stderr")"
fi
job=

# --- SIGKILL to mpirun while rank 0 commits ---------------------------------------------------------
# 2,001 outputs over an old set (2,000 mosaic files and the text), synthetic images; mpirun is killed
# once rank 0's first backup exists. Rank 0 then ends (its own watch, or the launcher), in or after
# its commit; the launcher finishes a commit cut short from its journal: the new set whole.
dir=$work/commit
rm -rf "$dir" && mkdir -p "$dir"
commit_args=(--program "$prog" --random 8000 --output "$dir/r" --ranks-per-node 2 -- --device synthetic --all-ranks -q
             --mosaic-tiles 2 --formats txt,bmp)
echo "a note of the user's" > "$dir/notes.txt"
if timeout 120 ./run_parallel.sh "${commit_args[@]}" > /dev/null 2> "$work/stderr"; then
  old_sizes=$(stat -c %s "$dir"/r-*.bmp | sort | uniq -c | awk '{ print $1 " of " $2 " bytes" }')
  env --default-signal ./run_parallel.sh "${commit_args[@]}" --grid-padding 2 > "$work/stdout" 2> "$work/stderr" &
  job=$!
  name="SIGKILL to mpirun while rank 0 commits 2,001 outputs"
  if wait_for "$dir" committing 60 && pid=$(mpirun_pid "$dir"); then
    kill -KILL "$pid"
    wait_pid "$job" 60
    judge "$name" "$dir" $? commit
  else
    wait_pid "$job" 60
    fail "$name" "the commit was not seen (status $?): $(tail -c 300 "$work/stderr")"
  fi
  job=
else
  fail "SIGKILL to mpirun while rank 0 commits" "the first job failed: $(tail -c 300 "$work/stderr")"
fi

# --- SIGKILL to run_parallel.sh itself --------------------------------------------------------------
dir=$work/script
start_job "$dir"
name="SIGKILL to run_parallel.sh"
if wait_for "$dir" working 60 && sleep 0.5; then
  kill -KILL "$job"
  wait "$job" 2> /dev/null
  got=$?
  start=$SECONDS
  while [ -n "$(job_pids "$dir" all)" ] && [ $SECONDS -lt $((start + 10)) ]; do sleep 0.1; done
  if ! grep -q "^run_parallel: the script (pid $job) was killed (SIGKILL); its job was stopped" "$work/stderr"; then
    fail "$name" "the guard did not say it stopped the job: $(tail -c 400 "$work/stderr")"
  else
    judge "$name (all ended $((SECONDS - start)) s later)" "$dir" $got
  fi
else
  wait_pid "$job" 60
  fail "$name" "the job did not start: $(tail -c 300 "$work/stderr")"
fi
job=

suite_end
