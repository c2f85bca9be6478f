#!/usr/bin/env bash
# mpi_faults.sh: an MPI job under faults and load, on this machine (CPU backend, mpirun).
#
#   a rank killed from outside (SIGKILL) mid-run: the job ends within seconds, non-zero, one line
#     naming the rank, no output file, the old output intact, no temporary file
#   a launcher that ignores SIGTERM (as a deadlocked mpirun does): killed with its ranks after
#     FACEGEN_STOP_SECONDS, exit 143, nothing left
#   the whole job interrupted mid-run (SIGINT to mpirun; SIGINT or SIGTERM to run_parallel.sh): the
#     same, with exit status 1 (mpirun's own), 130 or 143
#   SIGTERM to run_parallel.sh, or SIGKILL to rank 0, while rank 0 commits 2,001 outputs: the
#     launcher finishes the commit from its journal: the new set whole, nothing left
#   run_parallel.sh with descriptors 0, 1, 2 or all closed: outputs whole
#   run_parallel.sh under a soft stack limit of 24 or 64 KiB: outputs whole; a hard one of 256 KiB:
#     refused in one line; under ulimit -v 150000 (where mpirun itself fails or hangs): refused in
#     one line; at 600000 the job runs
#   a job with a rank killed beside a single process writing the same prefix: the other run's
#     temporaries stay and its outputs are whole
#   a model with finite weights that overflow (tconv1, tconv4): exit 1, one line naming the layer
#   64 ranks oversubscribed on this machine: files byte-identical to one process's
#
# mpi_ranks.sh injects faults from inside a rank (FACEGEN_TEST_FAULT); here they come from outside,
# as a crash, the OOM killer or an operator would deliver them. Usage: mpi_faults.sh [build-dir];
# exit 0 pass, 77 skipped (says why), 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh mpi_faults
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "mpi_faults: $prog or $model is missing (run make)"; exit 1; }
command -v mpirun > /dev/null || skip_suite "mpirun is not installed (make deps)"
ldd "$prog" | grep -q libmpi || skip_suite "$prog was built without MPI"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FACEGEN_TEST_FAULT

work=$(mktemp -d /tmp/facegen-mpi-faults.XXXXXX)
job=
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2>/dev/null
  rm -rf "$work"
}
on_exit cleanup

"$build/make-latents" --count 3000 --seed 5 --output "$work/l3000.txt" > /dev/null || exit 1
"$build/make-latents" --count 200 --seed 6 --output "$work/l200.txt" > /dev/null || exit 1

# start_job RANKS PREFIX INPUT [flags]: run_parallel.sh in the background; $job is its pid. Every
# signal is set back to its default first (env --default-signal): a background job of a script
# starts with SIGINT and SIGQUIT ignored, which a terminal's foreground job does not, and so does
# every child of a shell started with them ignored (nohup, a CI runner's background step).
start_job() {
  local ranks=$1 prefix=$2 input=$3
  shift 3
  env --default-signal ./run_parallel.sh --program "$prog" --model "$model" --input "$input" --output "$prefix" \
    --ranks-per-node "$ranks" -- --device cpu --all-ranks "$@" > "$work/stdout" 2> "$work/stderr" &
  job=$!
}

# descendant_pid NAME: the pid of the first process named NAME below the job started last.
descendant_pid() {
  local pid
  for pid in $(descendant_pids "$job"); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = "$1" ] && { echo "$pid"; return 0; }
  done
  return 1
}

# rank_pid RANK: the pid of that rank of the job started last (from OMPI_COMM_WORLD_RANK in its
# environment), among the job's descendants only.
rank_pid() {
  local pid
  for pid in $(descendant_pids "$job"); do
    if [ "$(cat /proc/$pid/comm 2>/dev/null)" = facegen ] &&
       tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# wait_ranks_writing DIR SECONDS: until the job is under way: its text output's temporary holds more
# than the count's line (the bmp's is made at its full size at once).
wait_ranks_writing() {
  local tries=$(($2 * 20)) f
  while [ $tries -gt 0 ]; do
    for f in "$1"/*.txt.tmp-*; do
      [ -f "$f" ] && [ "$(stat -c %s "$f" 2> /dev/null || echo 0)" -gt 100 ] && return 0
    done
    sleep 0.05
    tries=$((tries - 1))
  done
  return 1
}

# after_fault NAME STATUS KILL-TIME LINE-PATTERN: the job's end after a fault.
after_fault() {
  local name=$1 got=$2 killed_at=$3 pattern=$4
  local took=$((SECONDS - killed_at)) left
  left=$(ls "$work/out" | grep -v '^keep.txt$' || true)
  if [ "$got" -eq 0 ]; then
    fail "$name" "the job succeeded"
  elif [ "$took" -gt 15 ]; then
    fail "$name" "the job took $took s to end after the fault"
  elif ! grep -qE "$pattern" "$work/stderr"; then
    fail "$name" "no line matching '$pattern': $(head -c 600 "$work/stderr")"
  elif [ -n "$left" ]; then
    fail "$name" "left files behind: $left"
  elif ! cmp -s "$work/out/keep.txt" <(earlier_output txt "old contents"); then
    fail "$name" "the existing output was changed"
  else
    pass "$name (status $got, ended $took s after the fault): $(grep -E "$pattern" "$work/stderr" | head -n1)"
  fi
}

echo "facegen MPI jobs under faults and load:"

# --- one rank killed from outside ------------------------------------------------------------------
for victim in 1 0; do
  rm -rf "$work/out" && mkdir -p "$work/out" && earlier_output txt "old contents" > "$work/out/keep.txt"
  start_job 3 "$work/out/keep" "$work/l3000.txt" --images-per-round 64
  name="rank $victim of 3 killed by SIGKILL from outside mid-run"
  if wait_ranks_writing "$work/out" 60 && pid=$(rank_pid $victim); then
    kill -9 "$pid"
    killed_at=$SECONDS
    wait_pid "$job" 60
    got=$?
    job=
    after_fault "$name" $got $killed_at "^facegen: error on rank $victim \(host [^)]+\): the process died of signal 9"
  else
    fail "$name" "the job did not start its ranks within 60 s: $(head -c 300 "$work/stderr")"
    kill "$job" 2>/dev/null; wait_pid "$job" 30; job=
  fi
done

# --- the whole job interrupted ----------------------------------------------------------------------
# SIGINT to mpirun alone (it stops every rank; its own exit status is 1), then SIGINT and SIGTERM to
# run_parallel.sh (Ctrl-C at a terminal, scancel, kill), which hands the signal on to mpirun and
# exits 130 or 143.
for target in mpirun INT TERM; do
  rm -rf "$work/out" && mkdir -p "$work/out" && earlier_output txt "old contents" > "$work/out/keep.txt"
  start_job 3 "$work/out/keep" "$work/l3000.txt" --images-per-round 64
  case $target in
    mpirun) name="SIGINT to mpirun mid-run"; pattern="the job failed \(exit status 1\)"; want=1 ;;
    INT) name="SIGINT to run_parallel.sh mid-run"; pattern="interrupted \(SIGINT\)"; want=130 ;;
    TERM) name="SIGTERM to run_parallel.sh mid-run"; pattern="terminated \(SIGTERM\)"; want=143 ;;
  esac
  if wait_ranks_writing "$work/out" 60; then
    if [ $target = mpirun ]; then
      pid=$(descendant_pid mpirun)
      [ -n "$pid" ] || pid=$(descendant_pid orterun)
      kill -INT "${pid:?no mpirun below the job}"
    else
      kill -$target "$job"
    fi
    killed_at=$SECONDS
    wait_pid "$job" 60
    got=$?
    job=
    if [ "$got" -ne "$want" ]; then
      fail "$name" "exit status $got, expected $want: $(head -c 400 "$work/stderr")"
    else
      after_fault "$name" $got $killed_at "$pattern"
    fi
  else
    fail "$name" "the job did not start within 60 s"
    kill "$job" 2>/dev/null; wait_pid "$job" 30; job=
  fi
done

# --- a launcher that does not stop ------------------------------------------------------------------
# An mpirun deadlocked on its own ignores the SIGTERM handed on to it (seen under ulimit -v 150000):
# stood in for by one that ignores SIGTERM and SIGINT and sleeps. The launcher kills it and what it
# started FACEGEN_STOP_SECONDS (here 2) after the signal, says so, and ends with 143; nothing is left.
mkdir -p "$work/fakebin" "$work/hang"
printf '%s\n' '#!/usr/bin/env bash' "trap '' TERM INT" 'sleep 317 & wait; wait' > "$work/fakebin/mpirun"
chmod +x "$work/fakebin/mpirun"
env --default-signal PATH="$work/fakebin:$PATH" FACEGEN_STOP_SECONDS=2 ./run_parallel.sh --program "$prog" --random 20 \
  --output "$work/hang/r" --ranks-per-node 2 -- --device synthetic > /dev/null 2> "$work/stderr" &
job=$!
for _ in $(seq 100); do [ -n "$(descendant_pid sleep)" ] && break; sleep 0.1; done
left_before=$(descendant_pids "$job" | wc -l)
kill -TERM "$job"
start=$SECONDS
wait_pid "$job" 30
got=$?
for _ in $(seq 10); do  # what was killed is gone within half a second
  stray=$(pgrep -f "$work/fakebin/mpirun" ; pgrep -x -f "sleep 317")
  [ -z "$stray" ] && break
  sleep 0.05
done
job=
if [ $got = 143 ] && grep -q "had not stopped 2 s after SIGTERM: killed, with its ranks" "$work/stderr" && [ -z "$stray" ] &&
   [ -z "$(ls -A "$work/hang")" ]; then
  pass "a launcher that ignores SIGTERM: killed with what it started after 2 s, exit 143 in $((SECONDS - start)) s, nothing left"
else
  fail "a launcher that ignores SIGTERM" "status $got after $((SECONDS - start)) s ($left_before processes below the job), left running: ${stray:-none}: $(tail -c 300 "$work/stderr")"
  [ -z "$stray" ] || kill -KILL $stray 2> /dev/null
fi

# --- stopped or killed while rank 0 commits the outputs ---------------------------------------------
# 2,001 outputs over an old set (2,000 mosaic files and the text). SIGTERM to run_parallel.sh once the
# commit has begun (its first backup appears): mpirun hands it on and kills rank 0 a second later,
# often before its renames are done; the launcher finishes the commit from rank 0's journal. And
# rank 0 killed by SIGKILL before change 2,500 of the commit's 6,000 (injected): the same. Either
# way the new set is in place whole, nothing of the commit is left, and the last line says so.
commit_case() {  # commit_case NAME WANT-STATUS [sigterm]
  local name=$1 want=$2 how=${3:-} got sizes left
  local args=(--random 8000 --output "$work/many/r" --ranks-per-node 2 -- --device synthetic --all-ranks -q
              --mosaic-tiles 2 --formats txt,bmp)
  rm -rf "$work/many" && mkdir -p "$work/many"
  timeout 120 ./run_parallel.sh --program "$prog" "${args[@]}" > /dev/null 2> "$work/stderr" ||
    { fail "$name" "the first job failed: $(head -c 300 "$work/stderr")"; return; }
  if [ "$how" = sigterm ]; then
    start_job_args "${args[@]}" --grid-padding 2
    local deadline=$((SECONDS + 60))
    while kill -0 "$job" 2> /dev/null && ! compgen -G "$work/many/r-2000.bmp.tmp-*" > /dev/null &&
          [ $SECONDS -lt $deadline ]; do sleep 0.05; done
    while kill -0 "$job" 2> /dev/null && ! compgen -G "$work/many/.facegen-old-*" > /dev/null &&
          [ $SECONDS -lt $deadline ]; do :; done
    kill -TERM "$job"
  else
    FACEGEN_TEST_KILL_COMMIT=2500 start_job_args "${args[@]}" --grid-padding 2
  fi
  wait_pid "$job" 60
  got=$?
  job=
  sizes=$(stat -c %s "$work"/many/r-*.bmp | sort | uniq -c | awk '{ print $1 " of " $2 " bytes" }')
  left=$(ls -A "$work/many" | grep -vxE 'r-[0-9]{4}\.bmp|r\.txt' | head -n 3 | tr '\n' ' ')
  if [ "$got" -ne "$want" ]; then
    fail "$name" "exit status $got, expected $want: $(head -c 400 "$work/stderr")"
  elif ! tail -n 1 "$work/stderr" | grep -qE "^run_parallel: .* after its outputs were written: the new outputs are in place$"; then
    fail "$name" "the last line does not say that the new outputs are in place: $(tail -n 3 "$work/stderr")"
  elif [ "$sizes" != "2000 of 54190 bytes" ]; then
    fail "$name" "not the whole new set of mosaic files: $sizes"
  elif [ -n "$left" ]; then
    fail "$name" "entries left: $left"
  else
    pass "$name: exit $got, the new set whole ($sizes), nothing left: $(grep -c 'finished the commit' "$work/stderr") commit(s) finished by the launcher"
  fi
}
# start_job_args ARGS...: run_parallel.sh with these arguments in the background, as start_job.
start_job_args() {
  env --default-signal ./run_parallel.sh --program "$prog" "$@" > "$work/stdout" 2> "$work/stderr" &
  job=$!
}
commit_case "SIGTERM to run_parallel.sh while rank 0 commits 2,001 outputs" 143 sigterm
commit_case "rank 0 killed (SIGKILL) in the middle of its commit of 2,001 outputs" 137

# --- run_parallel.sh with standard descriptors closed ----------------------------------------------
# Each closed descriptor gets /dev/null (a write to a closed stdout once ended the script silently,
# status 1, before the job started): the outputs whole, nothing written into them.
for closed in 0 1 2 012; do
  rm -rf "$work/fd" && mkdir -p "$work/fd"
  fd_job=(./run_parallel.sh --program "$prog" --random 20 --output "$work/fd/r" --ranks-per-node 2 --
          --device synthetic --all-ranks -q)
  case $closed in
    0) "${fd_job[@]}" <&- > /dev/null 2> "$work/stderr" ;;
    1) "${fd_job[@]}" >&- 2> "$work/stderr" ;;
    2) "${fd_job[@]}" > /dev/null 2>&- ;;
    012) "${fd_job[@]}" <&- >&- 2>&- ;;
  esac
  got=$?
  if [ $got = 0 ] && [ "$(head -n1 "$work/fd/r.txt")" = 20 ] && [ -s "$work/fd/r.bmp" ] && [ "$(ls -A "$work/fd" | wc -l)" = 2 ]; then
    pass "run_parallel.sh with descriptor(s) $closed closed: outputs whole, nothing written into them"
  else
    fail "run_parallel.sh with descriptor(s) $closed closed" "status $got: $(ls -A "$work/fd" | tr '\n' ' ')"
  fi
done

# --- run_parallel.sh under a small stack limit ----------------------------------------------------
# mpirun and its daemons crash at a soft limit of 128 KiB or less: the launcher raises the soft limit
# as facegen raises its own (24 and 64 KiB: the job whole, as one process writes it); a hard limit
# under facegen's 1 MiB is refused in one line before anything starts. (At 16 KiB bash itself cannot
# run the launcher.)
timeout 120 "$prog" --device synthetic --random 20 --output "$work/stack-ref" -q || fail "single-process reference" "exit status $?"
for limit in "-S -s 24" "-S -s 64" "-s 256"; do
  rm -rf "$work/stack" && mkdir -p "$work/stack"
  (ulimit $limit && exec timeout 120 ./run_parallel.sh --program "$prog" --random 20 --output "$work/stack/r" \
     --ranks-per-node 2 -- --device synthetic --all-ranks -q) > /dev/null 2> "$work/stderr"
  got=$?
  if [ "$limit" = "-s 256" ]; then
    if [ $got = 1 ] && [ "$(wc -l < "$work/stderr")" = 1 ] && grep -q "stack size limit (ulimit -s) is 256 KiB" "$work/stderr" &&
       [ -z "$(ls -A "$work/stack")" ]; then
      pass "run_parallel.sh under ulimit $limit: exit 1, one line, nothing written: $(cat "$work/stderr")"
    else
      fail "run_parallel.sh under ulimit $limit" "status $got, $(ls -A "$work/stack" | wc -l) entries: $(head -c 300 "$work/stderr")"
    fi
  elif [ $got = 0 ] && cmp -s "$work/stack/r.txt" "$work/stack-ref.txt" && cmp -s "$work/stack/r.bmp" "$work/stack-ref.bmp"; then
    pass "run_parallel.sh under ulimit $limit: outputs identical to one process"
  else
    fail "run_parallel.sh under ulimit $limit" "status $got: $(head -c 300 "$work/stderr")"
  fi
done

# Under ulimit -v 150000 mpirun itself failed, crashed or hung: the launcher refuses anything under
# 512 MiB in one line before anything starts. At 600000 (586 MiB) the job runs.
for limit in 150000 600000; do
  rm -rf "$work/stack" && mkdir -p "$work/stack"
  (ulimit -v $limit && exec timeout 120 ./run_parallel.sh --program "$prog" --model "$model" --random 64 \
     --output "$work/stack/r" --ranks-per-node 2 -- --device cpu --formats npy -q) > /dev/null 2> "$work/stderr"
  got=$?
  if [ $limit = 600000 ] && [ $got = 0 ] && [ -s "$work/stack/r.npy" ]; then
    pass "run_parallel.sh under ulimit -v $limit: the job runs"
  elif [ $limit = 150000 ] && [ $got = 1 ] && [ "$(wc -l < "$work/stderr")" = 1 ] &&
       grep -q "^run_parallel: the address-space limit (ulimit -v) is 150000 KiB" "$work/stderr" && [ -z "$(ls -A "$work/stack")" ]; then
    pass "run_parallel.sh under ulimit -v $limit: refused in one line: $(cat "$work/stderr")"
  else
    fail "run_parallel.sh under ulimit -v $limit" "status $got, $(ls -A "$work/stack" | wc -l) entries: $(tail -c 400 "$work/stderr")"
  fi
done

# --- a failed job beside another run of the same prefix -------------------------------------------
# A single process writes PREFIX.* from a pipe that holds back the second half of its latents until a
# job on the same prefix, with a rank killed, has ended: the job removes its own ranks' temporaries
# only (named with its token), so the other run's stay, and it then finishes with every output whole.
rm -rf "$work/same" && mkdir -p "$work/same" && mkfifo "$work/latents.fifo"
"$prog" --device synthetic --input "$work/latents.fifo" --formats txt,bmp,png --output "$work/same/o" -q \
  2> "$work/other.stderr" &
other=$!
exec 8> "$work/latents.fifo"
half=$(($(stat -c %s "$work/l200.txt") / 2))
head -c $half "$work/l200.txt" >&8
deadline=$((SECONDS + 60))
until [ "$(ls -A "$work/same" | grep -c '\.tmp-')" -ge 3 ] || ! kill -0 $other 2> /dev/null || [ $SECONDS -ge $deadline ]; do
  sleep 0.05
done
FACEGEN_TEST_FAULT=1:kill timeout 120 ./run_parallel.sh --program "$prog" --random 3000 --output "$work/same/o" \
  --ranks-per-node 2 -- --device synthetic --all-ranks --formats txt,bmp,png -q > /dev/null 2> "$work/stderr"
got=$?
others_temps=$(ls -A "$work/same" | grep -c '\.tmp-')
tail -c +$((half + 1)) "$work/l200.txt" >&8
exec 8>&-
wait_pid $other 120
other_status=$?
if [ $got = 0 ]; then
  fail "a failed job beside another run of the same prefix" "the job succeeded"
elif [ "$others_temps" -lt 3 ]; then
  fail "a failed job beside another run of the same prefix" "only $others_temps temporaries of the other run were there after the job"
elif [ $other_status != 0 ]; then
  fail "a failed job beside another run of the same prefix" "the other run failed ($other_status): $(head -c 300 "$work/other.stderr")"
elif [ "$(ls "$work/same/o" | wc -l)" != 200 ] || [ "$(stat -c %s "$work/same/o.bmp")" != $((15 * 15 * 64 * 64 * 3 + 54)) ] ||
     [ -n "$(ls -A "$work/same" | grep -vxE 'o|o\.txt|o\.bmp')" ]; then
  fail "a failed job beside another run of the same prefix" "the other run's outputs are not whole: $(ls -A "$work/same" | head -c 300)"
else
  pass "a failed job (status $got) beside another run of the same prefix: the other run's $others_temps temporaries kept, its outputs whole"
fi

# --- a finite model that overflows, on 2 ranks -----------------------------------------------------
# Each rank checks its own images; the layer is named once, by the lowest rank that found it.
mkdir -p "$work/bad"
for block in tconv1 tconv4; do
  /usr/bin/python3 tests/lib/overflowing_model.py "$model" "$work/overflow-$block.bin" "$block" ||
    { fail "2 ranks, model overflowing in $block" "python3 failed"; continue; }
  timeout 120 ./run_parallel.sh --program "$prog" --model "$work/overflow-$block.bin" --input "$work/l200.txt" \
    --output "$work/bad/r" --ranks-per-node 2 -- --device cpu --all-ranks > /dev/null 2> "$work/stderr"
  got=$?
  left=$(ls -A "$work/bad")
  if [ $got -ne 1 ]; then
    fail "2 ranks, model overflowing in $block" "exit status $got, expected 1: $(head -c 600 "$work/stderr")"
  elif [ "$(grep -c "output of layer $block is NaN or Inf" "$work/stderr")" != 1 ] ||
       [ "$(grep '^facegen' "$work/stderr" | grep -vc '^facegen: progress ')" != 1 ]; then  # a slow run's progress lines aside
    fail "2 ranks, model overflowing in $block" "not one line naming $block: $(head -c 600 "$work/stderr")"
  elif [ -n "$left" ]; then
    fail "2 ranks, model overflowing in $block" "files left: $left"
  else
    pass "2 ranks, model overflowing in $block: exit 1, nothing left: $(grep '^facegen' "$work/stderr")"
  fi
done

# --- 64 ranks oversubscribed on this machine -------------------------------------------------------
timeout 120 "$prog" --device cpu --model "$model" --input "$work/l200.txt" --output "$work/ref200" --quiet ||
  fail "single-process reference" "exit status $?"
start=$SECONDS
if timeout 600 ./run_parallel.sh --program "$prog" --model "$model" --input "$work/l200.txt" --output "$work/p64" \
     --ranks-per-node 64 -- --device cpu --all-ranks > "$work/stdout" 2> "$work/stderr"; then
  if cmp -s "$work/p64.txt" "$work/ref200.txt" && cmp -s "$work/p64.bmp" "$work/ref200.bmp"; then
    pass "64 ranks on $(nproc) cores, N = 200: txt and bmp identical to one process ($((SECONDS - start)) s; $(grep -E '^ranks' "$work/stdout" | head -n1))"
  else
    fail "64 ranks" "outputs differ from the single-process run"
  fi
else
  fail "64 ranks" "exit status $? after $((SECONDS - start)) s: $(head -c 600 "$work/stderr")"
fi

suite_end
