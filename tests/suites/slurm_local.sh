#!/usr/bin/env bash
# slurm_local.sh: the sbatch scripts in slurm/ under a real Slurm, started here for the test.
#
# Starts munged (unless one answers already) and a one-node Slurm cluster on this machine (slurmctld
# and slurmd, configuration, state and logs in a temporary directory, ports of their own), submits
# slurm/facegen-cpu.sbatch twice (ranks started by srun --mpi=pmix when Slurm has PMIx, else mpirun;
# then by mpirun on Slurm's node list), both with 2 ranks and the shipped model, waits for them, and
# compares their files with the single-process program's; the job logs must be named by job id.
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

work=$(mktemp -d /tmp/facegen-slurm.XXXXXX)
chmod 755 "$work"
started_munged=
cleanup() {
  if [ -f "$work/etc/slurm.conf" ]; then
    SLURM_CONF=$work/etc/slurm.conf scancel --quiet --user=root 2>/dev/null
  fi
  for pidfile in "$work/slurmd.pid" "$work/slurmctld.pid" ${started_munged:+"$started_munged"}; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$work"
}
trap cleanup EXIT

# --- munge: use the running one, or start our own as the munge user -------------------------------
if ! munge -n 2>/dev/null | unmunge > /dev/null 2>&1; then
  [ -f /etc/munge/munge.key ] || skip_suite "/etc/munge/munge.key is missing (the munge package creates it)"
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  runuser -u munge -- munged --pid-file=/run/munge/munged.pid > "$work/munged.out" 2>&1 ||
    skip_suite "munged would not start: $(cat "$work/munged.out")"
  started_munged=/run/munge/munged.pid
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge > /dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge > /dev/null 2>&1 || skip_suite "munged started but does not answer"
fi

# --- a one-node cluster ------------------------------------------------------------------------
node=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/etc" "$work/state" "$work/spool"
cat > "$work/etc/slurm.conf" <<CONF
ClusterName=facegentest
SlurmctldHost=$node
SlurmctldPort=16817
SlurmdPort=16818
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
mkdir -p "$work/repo/inputs" "$work/repo/outputs"
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
"$build/facegen" --device cpu --input "$work/repo/inputs/slurm7.txt" \
  --output "$work/reference" --quiet || { echo "slurm_local: the single-process reference failed"; exit 1; }

# submit NAME SCRIPT [sbatch flags] -- [script arguments]: sbatch --wait from the repository copy.
submit() {
  local name=$1 script=$2
  shift 2
  local flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  local start=$SECONDS
  (cd "$work/repo" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
     timeout 120 sbatch --parsable --wait "${flags[@]}" "slurm/$script" "$@") > "$work/sbatch.out" 2>&1
  local status=$? job
  job=$(head -n1 "$work/sbatch.out" | tr -dc 0-9)
  local log=$work/repo/outputs/facegen-$job.log
  if [ $status -ne 0 ]; then
    fail "$name" "sbatch --wait: status $status; $(cat "$work/sbatch.out"); log: $(cat "$log" 2>/dev/null | tail -n 8)"
    return 1
  fi
  if [ -z "$job" ] || [ ! -f "$log" ]; then
    fail "$name" "no log named by the job id ($job) in outputs/: $(ls "$work/repo/outputs")"
    return 1
  fi
  echo "        job $job, $((SECONDS - start)) s, log outputs/facegen-$job.log:"
  sed 's/^/          | /' "$log"
  return 0
}

if submit "CPU script, 2 ranks" facegen-cpu.sbatch --ntasks-per-node=2 -- slurm7 one7 --all-ranks; then
  if cmp -s "$work/repo/outputs/one7.txt" "$work/reference.txt" && cmp -s "$work/repo/outputs/one7.bmp" "$work/reference.bmp" &&
     grep -q '^ranks     2 on 1 host; all generate' "$work/repo/outputs/facegen-"*.log; then
    pass "slurm/facegen-cpu.sbatch, 2 ranks: txt and bmp identical to one process"
  else
    fail "slurm/facegen-cpu.sbatch" "outputs differ from the single-process run, or not 2 generating ranks"
  fi
fi
rm -f "$work/repo/outputs/facegen-"*.log
if LAUNCHER=mpirun submit "CPU script on 1 node, mpirun" facegen-cpu.sbatch --nodes=1 --ntasks-per-node=2 -- \
     slurm7 multi7 --all-ranks; then
  if cmp -s "$work/repo/outputs/multi7.txt" "$work/reference.txt" && cmp -s "$work/repo/outputs/multi7.bmp" "$work/reference.bmp" &&
     grep -q 'mpirun -np 2 --host' "$work/repo/outputs/facegen-"*.log; then
    pass "slurm/facegen-cpu.sbatch (one node, LAUNCHER=mpirun on Slurm's host list): identical"
  else
    fail "slurm/facegen-cpu.sbatch, LAUNCHER=mpirun" "outputs differ from the single-process run, or mpirun was not used"
  fi
fi

# A rank killed under srun: the job must fail promptly, name the rank's task and host, leave no file.
rm -f "$work/repo/outputs/facegen-"*.log
start=$SECONDS
(cd "$work/repo" && FACEGEN_TEST_FAULT=1:kill timeout 120 sbatch --parsable --wait --ntasks-per-node=2 \
   slurm/facegen-cpu.sbatch slurm7 killed7 --all-ranks) > "$work/sbatch.out" 2>&1
status=$?
log=$(ls "$work/repo/outputs/facegen-"*.log 2>/dev/null | head -n1)
if [ $status -ne 0 ] && [ $status -ne 124 ] && [ -z "$(ls "$work/repo/outputs" | grep killed7)" ] &&
   grep -qE "task 1|rank 1" "$log" 2>/dev/null; then
  pass "a rank killed under srun: job failed in $((SECONDS - start)) s, no output; log: $(grep -E 'task 1|rank 1' "$log" | head -n1)"
else
  fail "a rank killed under srun" "sbatch status $status; outputs: $(ls "$work/repo/outputs"); log: $(cat "$log" 2>/dev/null | tail -n 6)"
fi

suite_end
