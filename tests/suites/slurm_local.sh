#!/usr/bin/env bash
# slurm_local.sh: the sbatch scripts in slurm/ under a real Slurm, started here for the test.
#
# Starts a munged of its own (tests/lib/munge.sh) and a one-node Slurm cluster on this machine (slurmctld
# and slurmd, configuration, state and logs in a temporary directory, free ports of their own), submits
# slurm/facegen-cpu.sbatch with 2 ranks and the shipped model, waits for each job, and compares its
# files with the single-process program's: a bare input name into a bare output name with no
# outputs/ folder (ranks started by srun --mpi=pmix when Slurm has PMIx, else mpirun), a .npy path
# into an output path (LAUNCHER=mpirun: mpirun on Slurm's node list), --random N, facegen's own flags
# passed through (--seeds, --formats, a --device of the user's), a job submitted from another folder by
# the script's path (the repository found from it), and STAGE_DIR (the inputs copied to each node with
# sbcast, read there, removed after). Each job logs into the submit directory, named by its job id; an
# input that does not exist fails the job with one line; the scripts share one block that finds the
# repository, and the three batch scripts one of argument handling, one of the time limit's and
# preemption's handling and one of staging; SIGUSR1 before the time limit stops a job of tar shards cleanly and
# requeues it (every run with --resume), twice, and its third run finishes it with one uninterrupted
# run's shards; it stops a txt,bmp job without requeueing it; SIGTERM to the whole job (preemption,
# scancel) stops it cleanly. slurm/facegen-serve.sbatch
# on 2 ranks names its node and port in the log, and scancel with a request in flight stops it cleanly.
# The GPU scripts ask for GPUs, which this one-node Slurm has none of; tests/suites/virtual_cluster.sh
# runs them on nodes with GPUs declared to Slurm but none usable. Stops everything it started, by
# pid. Exit 0 pass, 77 skipped (says why: not root, Slurm or munge not installed, daemons would not
# start), 1 fail. Usage: tests/suites/slurm_local.sh [build-dir]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh slurm_local
repo=$(pwd)
build=${1:-build}
case $build in /*) ;; *) build=$repo/$build ;; esac
[ -x "$build/facegen" ] && [ -f models/facegen-faces.safetensors ] || { echo "slurm_local: $build/facegen or models/facegen-faces.safetensors is missing (run make)"; exit 1; }
[ "$(id -u)" = 0 ] || skip_suite "starting slurmd and munged needs root (this runs as $(id -un))"
for tool in slurmctld slurmd sbatch sinfo scontrol munged munge unmunge mpirun; do
  command -v "$tool" > /dev/null || skip_suite "$tool is not installed (make test-deps installs slurm-wlm, munge and openmpi-bin)"
done

. tests/lib/munge.sh
work=$(mktemp -d /tmp/facegen-slurm.XXXXXX)
chmod 755 "$work"
cleanup() {
  if [ -f "$work/etc/slurm.conf" ]; then
    SLURM_CONF=$work/etc/slurm.conf scancel --quiet --user=root 2>/dev/null
  fi
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid"; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  munge_stop
  rm -rf "$work"
}
on_exit cleanup

# --- munge: one of the suite's own (tests/lib/munge.sh) -----------------------------------------------
munge_start "$work/munge" > "$work/munge.why" || skip_suite "$(cat "$work/munge.why")"

# --- a one-node cluster ------------------------------------------------------------------------
node=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/etc" "$work/state" "$work/spool"
# Ports no other process holds (another Slurm of another run may be on this machine too).
read -r ctld_port slurmd_port <<< "$(free_ports 2)"
[ -n "$slurmd_port" ] || skip_suite "no free TCP ports found"
cat > "$work/etc/slurm.conf" <<CONF
ClusterName=facegentest
SlurmctldHost=$node
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
AuthInfo=cred_expire=10,socket=$MUNGE_SOCKET
SchedulerParameters=sched_interval=2
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/etc/slurm.conf
slurmctld -f "$SLURM_CONF" > "$work/slurmctld.out" 2>&1 || skip_suite "slurmctld would not start: $(tail -n 3 "$work/slurmctld.log" "$work/slurmctld.out" 2>/dev/null)"
slurmd -f "$SLURM_CONF" > "$work/slurmd.out" 2>&1 || skip_suite "slurmd would not start: $(tail -n 3 "$work/slurmd.log" "$work/slurmd.out" 2>/dev/null)"
state=
for _ in $(seq 60); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || skip_suite "the Slurm node did not become idle within 30 s (state '$state'): $(tail -n 3 "$work/slurmd.log")"
echo "facegen under Slurm ($(sinfo --version), one node '$node' with $cpus CPUs, started by this test):"

# --- the repository as sbatch sees it: inputs/, outputs/, slurm/, models/, build/, run_parallel.sh ---
mkdir -p "$work/repo/inputs"  # no outputs/: the script makes it
ln -s "$repo/run_parallel.sh" "$work/repo/run_parallel.sh"
ln -s "$repo/slurm" "$work/repo/slurm"
ln -s "$repo/models" "$work/repo/models"
ln -s "$build" "$work/repo/build"
/usr/bin/python3 - "$work/repo/inputs/slurm7.txt" <<'PY'
import random, sys
rng = random.Random(77)
with open(sys.argv[1], "w") as f:
    f.write("7\n" + "\n".join(" ".join(f"{rng.gauss(0, 1):.6f}" for _ in range(100)) for _ in range(7)) + "\n")
PY
/usr/bin/python3 - "$work/repo/inputs/slurm7.txt" "$work/repo/inputs/slurm7.npy" <<'PY'
import sys, numpy
with open(sys.argv[1]) as f:
    n = int(f.readline())
    numpy.save(sys.argv[2], numpy.array(f.read().split(), dtype=numpy.float32).reshape(n, 100))
PY
for reference in "--input $work/repo/inputs/slurm7.txt reference" "--input $work/repo/inputs/slurm7.npy reference-npy" \
                 "--random 5 reference-random" "--random 2000 reference-rq/rq --formats tar --shard-images 50"; do
  set -- $reference
  mkdir -p "$(dirname "$work/$3")"
  timeout 60 "$build/facegen" --device cpu "$1" "$2" --output "$work/$3" "${@:4}" --quiet ||
    { echo "slurm_local: the single-process reference ($reference) failed"; exit 1; }
done
# Two mosaic files of 4 tiles: a job of 7 images that splits between 2 ranks (txt is one rank's).
split=(--formats bmp --mosaic-tiles 2)
timeout 60 "$build/facegen" --device cpu --input "$work/repo/inputs/slurm7.txt" "${split[@]}" --output "$work/reference-split" \
  --quiet || { echo "slurm_local: the single-process reference (split) failed"; exit 1; }

# sbatch_wait [sbatch arguments]: sbatch from the repository copy; prints the job id, then waits for
# the job, at most 120 s, polling every 0.2 s (sbatch --wait polls every few seconds, which made
# each job here take 10 s), and returns its exit code (124 past the deadline, the job cancelled).
sbatch_wait() {
  local id state
  id=$(cd "$work/repo" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 sbatch --parsable "$@") || return 1
  echo "$id"
  local deadline=$((SECONDS + 120))
  while [ $SECONDS -lt $deadline ]; do
    state=$(scontrol show job -o "$id" 2> /dev/null)
    case $state in
      *JobState=PENDING*|*JobState=CONFIGURING*|*JobState=RUNNING*|*JobState=COMPLETING*|"") sleep 0.2 ;;
      *JobState=COMPLETED*) return 0 ;;
      *" ExitCode="*) state=${state##* ExitCode=}; return $((${state%%:*} ? ${state%%:*} : 1)) ;;
      *) return 1 ;;
    esac
  done
  scancel "$id" 2> /dev/null
  return 124
}

# submit NAME SCRIPT [sbatch flags] -- [script arguments]: the job from the repository copy.
submit() {
  local name=$1 script=$2
  shift 2
  local flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  local start=$SECONDS
  sbatch_wait "${flags[@]}" "slurm/$script" "$@" > "$work/sbatch.out" 2>&1
  local status=$? job
  job=$(head -n1 "$work/sbatch.out" | tr -dc 0-9)
  local log=$work/repo/facegen-$job.log
  if [ $status -ne 0 ]; then
    fail "$name" "the job's status $status; $(cat "$work/sbatch.out"); log: $(cat "$log" 2>/dev/null | tail -n 8)"
    return 1
  fi
  if [ -z "$job" ] || [ ! -f "$log" ]; then
    fail "$name" "no log named by the job id ($job) in the submit directory: $(ls "$work/repo")"
    return 1
  fi
  echo "        job $job, $((SECONDS - start)) s, log facegen-$job.log:"
  sed 's/^/          | /' "$log"
  return 0
}

# same_as PREFIX REFERENCE: PREFIX.txt and PREFIX.bmp are REFERENCE's, byte for byte.
same_as() { cmp -s "$1.txt" "$2.txt" && cmp -s "$1.bmp" "$2.bmp"; }
# same_split_as PREFIX REFERENCE: the two mosaic files PREFIX-0001.bmp and PREFIX-0002.bmp are REFERENCE's.
same_split_as() { cmp -s "$1-0001.bmp" "$2-0001.bmp" && cmp -s "$1-0002.bmp" "$2-0002.bmp"; }

if submit "CPU script, 2 ranks" facegen-cpu.sbatch --ntasks-per-node=2 -- slurm7 one7 --all-ranks "${split[@]}"; then
  if same_split_as "$work/repo/outputs/one7" "$work/reference-split" && grep -q '^ranks     2 on 1 host; all generate' "$work/repo/facegen-"*.log; then
    pass "slurm/facegen-cpu.sbatch slurm7 one7, 2 ranks, no outputs/ folder before: outputs/one7 identical to one process"
  else
    fail "slurm/facegen-cpu.sbatch" "outputs differ from the single-process run, or not 2 ranks of which 1 generates"
  fi
fi
rm -f "$work/repo/facegen-"*.log
if LAUNCHER=mpirun submit "CPU script on 1 node, mpirun, a .npy path" facegen-cpu.sbatch --nodes=1 --ntasks-per-node=2 -- \
     inputs/slurm7.npy runs/npy7 --all-ranks; then
  if same_as "$work/repo/runs/npy7" "$work/reference-npy" && grep -q 'mpirun -np 2 --host' "$work/repo/facegen-"*.log; then
    pass "slurm/facegen-cpu.sbatch inputs/slurm7.npy runs/npy7 (LAUNCHER=mpirun on Slurm's host list): identical"
  else
    fail "slurm/facegen-cpu.sbatch, a .npy path, LAUNCHER=mpirun" "outputs differ from the single-process run, or mpirun was not used"
  fi
fi
rm -f "$work/repo/facegen-"*.log
if submit "CPU script, --random 5" facegen-cpu.sbatch --ntasks-per-node=2 -- --random 5 rnd5 --all-ranks; then
  if same_as "$work/repo/outputs/rnd5" "$work/reference-random"; then
    pass "slurm/facegen-cpu.sbatch --random 5 rnd5: identical to one process's --random 5"
  else
    fail "slurm/facegen-cpu.sbatch --random 5" "outputs differ from the single-process run"
  fi
fi

# facegen's own command line, every flag passed through (a latent source run_parallel.sh takes, formats,
# a --device of the user's that the script then does not add).
timeout 60 "$build/facegen" --device cpu --seeds 0-5,42 --formats png,npy --output "$work/reference-seeds" --quiet ||
  { echo "slurm_local: the single-process reference (seeds) failed"; exit 1; }
rm -f "$work/repo/facegen-"*.log
if submit "CPU script, facegen's flags" facegen-cpu.sbatch --ntasks-per-node=2 -- --seeds 0-5,42 --output runs/seeds \
     --formats png,npy --device cpu --all-ranks; then
  if diff -r "$work/repo/runs/seeds" "$work/reference-seeds" > /dev/null && cmp -s "$work/repo/runs/seeds.npy" "$work/reference-seeds.npy" &&
     [ -f "$work/repo/runs/seeds/seed0042.png" ]; then
    pass "slurm/facegen-cpu.sbatch --seeds 0-5,42 --output runs/seeds --formats png,npy --device cpu: identical to one process"
  else
    fail "slurm/facegen-cpu.sbatch with facegen's flags" "outputs differ: $(ls "$work/repo/runs/seeds" | head -c 200)"
  fi
fi
# Submitted from another folder, by the script's path: the repository is found from it; the input
# is found in the repository's inputs/, the outputs and the log go to the submit folder.
mkdir -p "$work/elsewhere"
id=$(cd "$work/elsewhere" && sbatch --parsable --ntasks-per-node=2 "$work/repo/slurm/facegen-cpu.sbatch" slurm7 away7 --all-ranks \
       2> "$work/sbatch.out")
for _ in $(seq 600); do
  case $(scontrol show job -o "$id" 2> /dev/null) in *JobState=PENDING*|*JobState=CONFIGURING*|*JobState=RUNNING*|*JobState=COMPLETING*) sleep 0.2 ;; *) break ;; esac
done
if same_as "$work/elsewhere/outputs/away7" "$work/reference" && [ -f "$work/elsewhere/facegen-$id.log" ]; then
  pass "sbatch PATH/slurm/facegen-cpu.sbatch from another folder: found the repository and inputs/slurm7; outputs and log in the submit folder"
else
  fail "sbatch from another folder" "job '$id' $(cat "$work/sbatch.out"); log: $(tail -n 5 "$work/elsewhere/facegen-$id.log" 2> /dev/null)"
fi
# STAGE_DIR: the model and the latents copied to every node's own folder with sbcast, read there,
# removed at the end; the files are one process's.
rm -f "$work/repo/facegen-"*.log
mkdir -p "$work/stage"
if STAGE_DIR=$work/stage submit "CPU script, inputs staged" facegen-cpu.sbatch --ntasks-per-node=2 -- slurm7 staged7 --all-ranks; then
  log=$(ls "$work/repo/facegen-"*.log | head -n1)
  if same_as "$work/repo/outputs/staged7" "$work/reference" && grep -q "^facegen-cpu: inputs staged in $work/stage/facegen-[0-9]* on every node$" "$log" &&
     grep -q -- "--model $work/stage/facegen-[0-9]*/model/facegen-faces.safetensors" "$log" &&
     grep -q -- "--input $work/stage/facegen-[0-9]*/latents/slurm7.txt" "$log" &&
     [ -z "$(ls -A "$work/stage")" ]; then
    pass "STAGE_DIR: the model and slurm7.txt staged with sbcast, read from there, removed after; identical to one process"
  else
    fail "STAGE_DIR" "left: $(ls -A "$work/stage"); log: $(grep -E 'staged|facegen ' "$log" | head -n 3)"
  fi
fi

# An input that does not exist: the job fails with one line naming it, and writes nothing.
rm -f "$work/repo/facegen-"*.log
before=$(ls -R "$work/repo")
sbatch_wait --ntasks-per-node=2 slurm/facegen-cpu.sbatch nosuch bad > "$work/sbatch.out" 2>&1
status=$?
log=$(ls "$work/repo/facegen-"*.log 2>/dev/null | head -n1)
if [ $status -ne 0 ] && [ $status -ne 124 ] && [ -n "$log" ] && [ "$(wc -l < "$log")" = 1 ] &&
   grep -qx "facegen-cpu: no input file for INPUT=nosuch (looked for nosuch, nosuch.txt, inputs/nosuch, inputs/nosuch.txt and in $work/repo/inputs)" "$log" &&
   [ "$(ls -R "$work/repo" | grep -v '^facegen-[0-9]*\.log$')" = "$(echo "$before")" ]; then
  pass "an input that does not exist: the job fails (sbatch status $status) with one line: $(cat "$log")"
else
  fail "an input that does not exist" "sbatch status $status; log: $(cat "$log" 2>/dev/null | head -n 4)"
fi

# The service: slurm/facegen-serve.sbatch on 2 ranks names its node and port in the job log; scancel
# while a request of 1,024 images is in flight (its first batch made): the request is answered in
# full, rank 0 says it stopped, and the job ends well within Slurm's KillWait (30 s).
rm -f "$work/repo/facegen-"*.log
start=$SECONDS
if ! srun --mpi=list 2>&1 | grep -q pmix; then
  skip "slurm/facegen-serve.sbatch under scancel: this Slurm has no PMIx, so mpirun would start the ranks, and scancel's SIGTERM reaches mpirun, which kills them (docs/service.md)"
else
  serve_job=$(cd "$work/repo" && sbatch --parsable --ntasks-per-node=2 slurm/facegen-serve.sbatch --device cpu --threads 1 \
                --port 0 --max-batch 4 2> "$work/sbatch.out")
  log=$work/repo/facegen-serve-$serve_job.log
  port=
  for _ in $(seq 600); do  # 60 s
    port=$(grep -o "^facegen-serve: listening on http://$node:[0-9]*/" "$log" 2> /dev/null | grep -o '[0-9]*/$' | tr -d /)
    [ -n "$port" ] && break
    case $(scontrol show job -o "$serve_job" 2> /dev/null) in *JobState=PENDING*|*JobState=CONFIGURING*|*JobState=RUNNING*) ;; *) break ;; esac
    sleep 0.1
  done
  if [ -z "$port" ]; then
    fail "slurm/facegen-serve.sbatch says where it listens" "job '$serve_job' $(cat "$work/sbatch.out"); log: $(tail -n 6 "$log" 2> /dev/null)"
  else
    timeout 60 /usr/bin/python3 "$repo/tests/lib/serve_client.py" "$port" "$work" "$repo/models/facegen-faces.safetensors" \
      "$build/facegen" inflight 1024 > "$work/inflight.out" 2>&1 &
    client=$!
    for _ in $(seq 300); do grep -q INFLIGHT "$work/inflight.out" && break; kill -0 "$client" 2> /dev/null || break; sleep 0.05; done
    cancelled=$SECONDS
    scancel "$serve_job"
    state=
    for _ in $(seq 400); do  # 40 s
      state=$(scontrol show job -o "$serve_job" 2> /dev/null)
      case $state in *JobState=RUNNING*|*JobState=COMPLETING*) sleep 0.1 ;; *) break ;; esac
    done
    wait_pid "$client" 30
    if grep -q '^READY {"status": "ready", "workers": 2}$' "$work/inflight.out" && grep -q '^INFLIGHT$' "$work/inflight.out" &&
       grep -q "^RESULT 200 $((128 + 1024 * 64 * 64 * 3))$" "$work/inflight.out" && grep -q '^facegen serve: stopped$' "$log" &&
       grep -q 'the service ended (status 0)' "$log" && [ $((SECONDS - cancelled)) -lt 20 ] &&
       ! curl -s --max-time 5 "http://127.0.0.1:$port/healthz" > /dev/null; then
      pass "slurm/facegen-serve.sbatch, 2 ranks: listens on $node:$port; scancel with 1,024 images in flight: answered in full, job ended $((SECONDS - cancelled)) s later ($((SECONDS - start)) s in all)"
    else
      fail "slurm/facegen-serve.sbatch and scancel" "client: $(tr '\n' ' ' < "$work/inflight.out" | head -c 300); $((SECONDS - cancelled)) s after scancel: ${state:0:200}; log: $(tail -n 8 "$log")"
    fi
  fi
fi

# The argument handling is one block, the same in every batch script (each is run as a copy by
# sbatch); the service's script takes no INPUT or OUTPUT.
block() { sed -n "/^# --- $2/,/^# --- end of the $2 block/p" "$1"; }
for part in "where facegen is" arguments "time limit and preemption" "staged inputs"; do
  differ=
  for script in slurm/*.sbatch; do
    [ "$script" = slurm/facegen-serve.sbatch ] && [ "$part" != "where facegen is" ] && continue
    [ -n "$(block "$script" "$part")" ] && [ "$(block "$script" "$part")" = "$(block slurm/facegen-cpu.sbatch "$part")" ] ||
      differ="$differ $script"
  done
  [ -z "$differ" ] && pass "slurm/*.sbatch: one block of $part handling, the same in each" ||
    fail "the scripts' $part handling" "missing or different in:$differ"
done

# --- the time limit and preemption ---------------------------------------------------------------------
# Slurm's own signal before the time limit comes with a granularity of a minute; the test sends the
# same signal the same way (scancel --batch --signal=USR1: to the batch shell, as --signal=B:USR1 does).
# tar shards (many files), a job longer than its time limit: it stops cleanly, requeues itself, every
# run passes --resume, and after two requeues it is finished with one uninterrupted run's bytes;
# txt,bmp: the job stops cleanly and is not requeued; SIGTERM to every process of the job (as
# preemption and scancel send it): the job stops cleanly. Nothing is left in outputs/ after each
# (after a job of tar shards, nothing but its finished shards and their manifest).
# job_state ID: "STATE RESTARTS" of a job.
job_state() { scontrol show job -o "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).* Restarts=\([0-9]*\).*/\1 \2/p'; }
# wait_log ID PATTERN SECONDS: until the job's log has a line matching PATTERN.
wait_log() {
  local tries
  for tries in $(seq $(($3 * 10))); do grep -qE "$2" "$work/repo/facegen-$1.log" 2> /dev/null && return 0; sleep 0.1; done
  return 1
}
# wait_ended ID SECONDS: until the job is no longer pending, running or being requeued.
wait_ended() {
  local tries
  for tries in $(seq $(($2 * 10))); do
    case $(job_state "$1") in PENDING*|RUNNING*|COMPLETING*|REQUEUE*|CONFIGURING*|"") sleep 0.1 ;; *) return 0 ;; esac
  done
  return 1
}
leftovers() { ls -A "$work/repo/outputs" | grep "^$1\|^\.facegen" | paste -sd' '; }
limit_case() {  # limit_case NAME PREFIX usr1|term [facegen flags]: the job signalled; its id in $case_id
  local name=$1 prefix=$2 how=$3 id log
  case_id=
  shift 3
  id=$(cd "$work/repo" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 sbatch --parsable --ntasks-per-node=2 \
         slurm/facegen-cpu.sbatch --random 3000 "$prefix" --all-ranks --images-per-round 64 "$@" 2> "$work/sbatch.out")
  log=$work/repo/facegen-$id.log
  if ! wait_log "$id" '^run_parallel: launching' 60 || ! sleep 2; then
    fail "$name" "the job did not start: $(cat "$work/sbatch.out") $(tail -n 5 "$log" 2> /dev/null)"
    scancel "$id" 2> /dev/null
    return 1
  fi
  case $how in
    usr1) scancel --batch --signal=USR1 "$id" ;;
    term) scancel --full --signal=TERM "$id" ;;
  esac
  case_id=$id
}
# A job of tar shards longer than its time limit: stopped by SIGUSR1 in its first and second runs, it
# requeues itself each time, every run passes --resume, and the third run finishes it. After each stop
# only finished shards (each byte for byte the single process's) and the manifest are left; at the end
# the shards are those of one uninterrupted run, and the last run kept what the others finished.
# stopped_leftovers PREFIX: what a stopped run left that is not a finished shard equal to the
# reference's or the manifest (a temporary, a lock, a shard that differs).
stopped_leftovers() {
  local name
  for name in $(ls -A "$work/repo/outputs" | grep "^$1\|^\.facegen"); do
    case $name in
      "$1.facegen-resume"|"$1.facegen-resume".[0-9]*) ;;
      "$1"-[0-9]*.tar) cmp -s "$work/repo/outputs/$name" "$work/reference-rq/$name" || echo "$name (differs)" ;;
      *) echo "$name" ;;
    esac
  done | paste -sd' '
}
# units_recorded: the shards the manifest of outputs/rq records, all ranks' parts together.
units_recorded() { cat "$work/repo/outputs/rq.facegen-resume"* 2> /dev/null | grep -c '^unit '; }
# usr1_after ID RUN UNITS: SIGUSR1 to the batch shell (as --signal=B:USR1 sends it) once run RUN of the
# job has launched its ranks and the manifest records UNITS shards: each run stops having finished
# some, and leaves some to the next.
usr1_after() {
  local tries
  for tries in $(seq 1200); do
    [ "$(grep -c '^run_parallel: launching' "$work/repo/facegen-$1.log" 2> /dev/null)" -ge "$2" ] &&
      [ "$(units_recorded)" -ge "$3" ] && { scancel --batch --signal=USR1 "$1"; return 0; }
    sleep 0.1
  done
  return 1
}
# wait_requeued ID COUNT: until the log says COUNT times that the job stopped and was requeued.
wait_requeued() {
  local tries
  for tries in $(seq 600); do
    [ "$(grep -c '^facegen-cpu: the time limit is near: stopped; requeued' "$work/repo/facegen-$1.log" 2> /dev/null)" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
start=$SECONDS
name="tar shards, SIGUSR1 before the time limit in runs 1 and 2"
id=$(cd "$work/repo" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 sbatch --parsable --ntasks-per-node=2 \
       slurm/facegen-cpu.sbatch --random 2000 rq --all-ranks --images-per-round 50 --formats tar --shard-images 50 \
       2> "$work/sbatch.out")
log=$work/repo/facegen-$id.log
problem=
for run in 1 2; do
  units=$(( $(units_recorded) + 2 ))
  if ! usr1_after "$id" $run $units; then
    problem="run $run did not start or finish $units shards in 120 s: $(job_state "$id"); $(tail -n 6 "$log" 2> /dev/null)"
  elif ! wait_requeued "$id" $run; then
    problem="run $run: no line saying it was requeued: $(tail -n 6 "$log")"
  elif [ -n "$(stopped_leftovers rq)" ]; then
    problem="left by stopped run $run beside its finished shards: $(stopped_leftovers rq)"
  fi
  [ -z "$problem" ] || break
done
if [ -z "$problem" ]; then
  wait_ended "$id" 120
  state=$(job_state "$id")
  shards=$(cd "$work/reference-rq" && ls rq-*.tar | wc -l)
  if ! grep -q "^facegen-cpu: run 3 of job $id: resuming (--resume)" "$log" ||
     [ "$(grep -cE '^  (srun|mpirun) .* --resume( |$)' "$log")" != 3 ]; then
    problem="not every run passed --resume: $state; $(grep -E 'resuming|^  (srun|mpirun)' "$log" | cut -c1-120 | paste -sd'|')"
  elif [ "$state" != "COMPLETED 2" ]; then
    problem="the job did not finish after 2 requeues: $state; $(tail -n 6 "$log")"
  elif ! kept=$(grep -oE '^resumed   kept [0-9,]+ files that an earlier run finished, made [0-9,]+' "$log" | tail -n 1) ||
       [[ $kept == *"kept 0 "* ]]; then
    problem="the last run kept nothing the others finished: ${kept:-no resumed line}"
  else
    for shard in $(cd "$work/reference-rq" && ls rq-*.tar); do
      cmp -s "$work/repo/outputs/$shard" "$work/reference-rq/$shard" || problem="$problem $shard"
    done
    [ -z "$problem" ] || problem="shards differ from one uninterrupted run's:$problem"
    [ -n "$problem" ] || [ -z "$(stopped_leftovers rq)" ] || problem="left at the end: $(stopped_leftovers rq)"
  fi
fi
if [ -z "$problem" ]; then
  pass "$name: stopped cleanly twice (nothing but finished shards and the manifest left), requeued, every run with --resume; finished by run 3 (${kept#resumed   }): $shards shards identical to one uninterrupted run ($((SECONDS - start)) s)"
else
  fail "$name" "$problem"
fi
scancel "$id" 2> /dev/null
for how in usr1 term; do
  start=$SECONDS
  case $how in
    usr1) name="txt,bmp, SIGUSR1 before the time limit"; want="^facegen-cpu: the time limit is near: stopped, not requeued" ;;
    term) name="SIGTERM to every process of the job (preemption, scancel)"; want="^facegen-cpu: the job was preempted or cancelled: stopped" ;;
  esac
  limit_case "$name" "stop$how" $how
  id=$case_id
  [ -n "$id" ] || continue
  log=$work/repo/facegen-$id.log
  wait_ended "$id" 60
  state=$(job_state "$id")
  if ! grep -qE "$want" "$log"; then
    fail "$name" "no line '$want': $state; $(tail -n 6 "$log")"
  elif [ "${state#* }" != 0 ]; then
    fail "$name" "requeued: $state"
  elif [ -n "$(leftovers "stop$how")" ]; then
    fail "$name" "left: $(leftovers "stop$how")"
  else
    pass "$name: stopped cleanly, not requeued, nothing left ($state, $((SECONDS - start)) s): $(grep -E "$want" "$log")"
  fi
done

# A rank killed under srun: the job must fail promptly, name the rank's task and host, leave no file.
# One BMP a tile: 7 files, so that rank 1 has images to make (and none of many files: no --resume).
rm -f "$work/repo/facegen-"*.log
start=$SECONDS
FACEGEN_TEST_FAULT=1:kill sbatch_wait --ntasks-per-node=2 slurm/facegen-cpu.sbatch slurm7 killed7 --all-ranks \
  "${split[@]}" > "$work/sbatch.out" 2>&1
status=$?
log=$(ls "$work/repo/facegen-"*.log 2>/dev/null | head -n1)
if [ $status -ne 0 ] && [ $status -ne 124 ] && [ -z "$(ls "$work/repo/outputs" | grep killed7)" ] &&
   grep -qE "task 1|rank 1" "$log" 2>/dev/null; then
  pass "a rank killed under srun: job failed in $((SECONDS - start)) s, no output; log: $(grep -E 'task 1|rank 1' "$log" | head -n1)"
else
  fail "a rank killed under srun" "sbatch status $status; outputs: $(ls "$work/repo/outputs"); log: $(cat "$log" 2>/dev/null | tail -n 6)"
fi

suite_end
