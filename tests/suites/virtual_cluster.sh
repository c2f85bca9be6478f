#!/usr/bin/env bash
# virtual_cluster.sh: facegen across nodes, on a cluster of three virtual nodes made on this machine.
#
# tests/lib/virtual_cluster.sh makes node1..node3: each its own network and UTS namespace (its own host
# name and address on a private subnet whose bridge lives in a namespace of its own), all sharing
# this machine's file system as cluster nodes share a parallel one; each runs an sshd with keys made
# here, which mpirun's ssh launcher uses (OMPI_MCA_plm_rsh_agent names the test's ssh config). Jobs
# start on node1, as from a login node:
#
#   make run_parallel ... NGPUS=2 HOSTS=node1,node2 (2 nodes x 2 ranks) and run_parallel.sh --hosts
#     with a hostfile (3 nodes x 1 rank): every file of every format the ranks write (bmp split into
#     numbered mosaics, a PNG folder, npy-u8 shards) byte-identical to one process's;
#     --verbose names each rank's own host and counts local ranks per node
#   a node without the model file, a node without the output directory (each an empty directory
#     mounted on node2 alone), all ranks of node2 killed mid-run, node2's link taken down mid-run:
#     the job ends within seconds, one line names rank and host, no output file, and nothing is left
#     behind on any node (no temporary or lock file, no OpenMPI session directory, no process)
#   the model and the latents staged in each node's own /tmp (3 nodes x 1 rank): identical to one
#     process; node2's copy of the model with a byte changed, or of the latents a line short: one line
#     naming rank 1, node2 and what differs, nothing written
#   mpirun killed (SIGKILL) on node1 mid-run, and under Slurm srun killed mid-run: run_parallel.sh
#     returns only once nothing of the job runs on node1, and nothing is left on any node
#
# Then tests/lib/slurm_cluster.sh (when Slurm and munge are installed) runs the sbatch
# commands on the same nodes, and facegen's own flags submitted from another folder with STAGE_DIR=/tmp
# (each node's own): the inputs copied to every node with sbcast, read there, removed after. The script removes everything it made on every exit path.
# Usage: tests/suites/virtual_cluster.sh [build-dir]; exit 0 pass, 77 skipped (says why), 1 fail.
# runner: alone (its cases hold a job to ending within 20 s of a node's ranks dying; beside the other
# suites on 2 cores, where the ranks, sshds and mpirun wait for the CPU, that took 42-52 s)
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh virtual_cluster
repo=$(pwd)
build=${1:-build}
case $build in /*) ;; *) build=$repo/$build ;; esac
[ -x "$build/facegen" ] && [ -x "$build/make-latents" ] || { echo "virtual_cluster: $build/facegen is missing (run make)"; exit 1; }
[ -f models/facegen-faces.safetensors ] || { echo "virtual_cluster: models/facegen-faces.safetensors is missing"; exit 1; }
[ "$(id -u)" = 0 ] || skip_suite "making network namespaces and starting sshd needs root (this runs as $(id -un))"
for tool in unshare nsenter ip mpirun ssh ssh-keygen /usr/sbin/sshd make; do
  command -v "$tool" > /dev/null || skip_suite "$tool is not installed (make test-deps installs openssh-server, openssh-client, iproute2, util-linux)"
done
ldd "$build/facegen" | grep -q libmpi || skip_suite "$build/facegen was built without MPI"
unshare --net --uts --mount true 2> /dev/null || skip_suite "this machine does not allow new network, UTS and mount namespaces"

source tests/lib/virtual_cluster.sh
work=$(mktemp -d /var/tmp/facegen-cluster.XXXXXX)  # not /tmp: each node has its own
chmod 755 "$work"
job=
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2> /dev/null
  declare -F slurm_cluster_down > /dev/null && slurm_cluster_down
  vc_down
  rm -rf "$work"
}
on_exit cleanup
trap 'exit 130' INT
trap 'exit 143' TERM

# A repository (or build) cloned under /tmp must still be seen by the nodes, which have /tmp's of their own.
VC_SHARED_PATHS=("$repo")
case $build in "$repo"/*) ;; *) VC_SHARED_PATHS+=("$build") ;; esac
vc_up_for_mpi 3 "$work/cluster" || skip_suite "the three virtual nodes are not there (the line above says why)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset FACEGEN_TEST_FAULT
vc_exec node1 ssh -F "$(vc_ssh_config)" node3 true 2> "$work/ssh.err" ||
  { echo "virtual_cluster: ssh from node1 to node3 failed: $(cat "$work/ssh.err")"; exit 1; }
echo "facegen on a virtual cluster (${VC_NODES[*]} on $VC_SUBNET.0/24, sshd on each; jobs start on node1):"

# --- the repository as the nodes see it: every entry a link to this one, but inputs/ and outputs/ ---
mkdir -p "$work/repo/inputs" "$work/repo/outputs"
for entry in "$repo"/*; do
  case $(basename "$entry") in inputs|outputs|build) ;; *) ln -s "$entry" "$work/repo/$(basename "$entry")" ;; esac
done
ln -s "$build" "$work/repo/build"
"$build/make-latents" --count 40 --seed 13 --output "$work/repo/inputs/cluster40.txt" > /dev/null || exit 1
"$build/make-latents" --count 3000 --seed 14 --output "$work/repo/inputs/cluster3000.txt" > /dev/null || exit 1

# The formats ranks write; each run writes all of them, the mosaic split into numbered files of 4 and
# npy-u8 shards of 4, so that the job splits into 10 blocks and every rank makes files of its own (an
# output of one file, txt, would be one rank's).
rank_formats=(bmp png npy-u8)
format_args=(--formats "$(IFS=,; echo "${rank_formats[*]}")" --mosaic-tiles 2 --shard-images 4)
mkdir -p "$work/reference"
"$build/facegen" --device cpu --input "$work/repo/inputs/cluster40.txt" --output "$work/reference/faces" \
  "${format_args[@]}" --quiet || { echo "virtual_cluster: the single-process reference failed"; exit 1; }

# same_files DIR PREFIX: every file of the reference, by name, identical; nothing more, nothing less.
same_files() {
  local dir=$1 prefix=$2 file
  [ "$(cd "$dir" && ls -d "$prefix"* | sed "s/^$prefix/faces/")" = "$(ls "$work/reference")" ] ||
    { echo "files $(cd "$dir" && ls -d "$prefix"* | tr '\n' ' ') against $(ls "$work/reference" | tr '\n' ' ')"; return 1; }
  for file in $(ls "$work/reference"); do
    diff -r "$work/reference/$file" "$dir/${file/#faces/$prefix}" > /dev/null || { echo "$file differs"; return 1; }
  done
}

# verbose_layout FILE: "rank/host/local rank/local size" of each rank line of --verbose, space-separated.
verbose_layout() {
  sed -n 's/^rank \([0-9]*\) of [0-9]*  host \([^ ]*\)  local rank \([0-9]*\) of \([0-9]*\).*/\1\/\2\/\3\/\4/p' "$1" | paste -sd' '
}

# left_behind DIR: what a failed job left: files in DIR, anything in a node's /tmp (OpenMPI's session
# directories), processes on any node but its sshd. Waits up to 5 s for what is on its way out.
left_behind() {
  local dir=$1 node tries stray=
  for tries in $(seq 25); do
    stray=
    for node in "${VC_NODES[@]}"; do
      stray+=$(vc_stray "$node" "${VC_SSHD_PID[$node]}" | sed "s/^/$node: /" | paste -sd' ')
    done
    [ -z "$stray" ] && break
    sleep 0.2
  done
  # A node's /tmp holds nothing but the mount points of the shared paths (VC_SHARED_PATHS).
  local kept='^$' shared
  for shared in "${VC_SHARED_PATHS[@]}"; do
    case $shared in /tmp/?*) shared=${shared#/tmp/}; kept+="|^node[0-9]*-tmp/${shared%%/*}\$" ;; esac
  done
  echo "$(ls -A "$dir") $(cd "$work/cluster" && ls -d node*-tmp/* 2> /dev/null | grep -vE "$kept") $stray" |
    sed 's/^ *//; s/ *$//'
}

# --- 2 nodes x 2 ranks, the documented command ------------------------------------------------------
start=$SECONDS
if vc_exec node1 make -s -C "$work/repo" -o build/facegen run_parallel INPUT=cluster40 OUTPUT=two-by-two NGPUS=2 \
     HOSTS=node1,node2 ARGS="--device cpu --all-ranks --verbose ${format_args[*]}" > "$work/stdout" 2> "$work/stderr"; then
  layout=$(verbose_layout "$work/stdout")
  want="0/node1/0/2 1/node1/1/2 2/node2/0/2 3/node2/1/2"
  if ! why=$(same_files "$work/repo/outputs" two-by-two); then
    fail "2 nodes x 2 ranks" "$why"
  elif [ "$layout" != "$want" ] || ! grep -q '^ranks     4 on 2 hosts' "$work/stdout"; then
    fail "2 nodes x 2 ranks, --verbose" "rank/host/local rank/local ranks '$layout', expected '$want'"
  else
    pass "make run_parallel NGPUS=2 HOSTS=node1,node2: ${rank_formats[*]} (mosaic in $(ls "$work/reference" | grep -c bmp) files) identical to one process; ranks $want ($((SECONDS - start)) s)"
  fi
else
  fail "2 nodes x 2 ranks" "exit status $?: $(tail -c 800 "$work/stderr")"
fi

# --- 3 nodes x 1 rank, from a hostfile -------------------------------------------------------------
printf '# the virtual nodes\nnode1\nnode2 slots=1\nnode3\n' > "$work/hostfile"
start=$SECONDS
if vc_exec node1 "$work/repo/run_parallel.sh" --hosts "$work/hostfile" --ranks-per-node 1 \
     --input "$work/repo/inputs/cluster40.txt" --output "$work/repo/outputs/three-by-one" \
     -- --device cpu --all-ranks --verbose "${format_args[@]}" > "$work/stdout" 2> "$work/stderr"; then
  layout=$(verbose_layout "$work/stdout")
  want="0/node1/0/1 1/node2/0/1 2/node3/0/1"
  if ! why=$(same_files "$work/repo/outputs" three-by-one); then
    fail "3 nodes x 1 rank" "$why"
  elif [ "$layout" != "$want" ]; then
    fail "3 nodes x 1 rank, --verbose" "rank/host/local rank/local ranks '$layout', expected '$want'"
  else
    pass "run_parallel.sh --hosts HOSTFILE (3 nodes x 1 rank): identical to one process; ranks $want ($((SECONDS - start)) s)"
  fi
else
  fail "3 nodes x 1 rank" "exit status $?: $(tail -c 800 "$work/stderr")"
fi

# --- inputs staged on each node ---------------------------------------------------------------------
# The model and the latents copied into each node's own /tmp (as sbcast or a copy to local disk
# stages them): another file on every node, the same bytes. 3 nodes x 1 rank: identical to one
# process. Then node2's copy of the model with one byte changed (the same size), and node2's copy of
# the latents one line short: the job fails at once with one line naming rank 1, node2 and what
# differs, and writes nothing.
staged=/tmp/facegen-staged
commas() { echo "$1" | sed ':a; s/\B[0-9]\{3\}\>/,&/; ta'; }  # 20549132 -> 20,549,132
stage() {  # stage: fresh copies on every node
  local node
  for node in "${VC_NODES[@]}"; do
    rm -rf "$VC_DIR/$node-tmp/facegen-staged" && mkdir -p "$VC_DIR/$node-tmp/facegen-staged"
    cp models/facegen-faces.safetensors "$VC_DIR/$node-tmp/facegen-staged/model.safetensors"
    cp "$work/repo/inputs/cluster40.txt" "$VC_DIR/$node-tmp/facegen-staged/latents.txt"
  done
}
staged_job() {  # staged_job PREFIX: 3 nodes x 1 rank on the staged copies, into the shared outputs
  vc_exec node1 timeout 120 "$work/repo/run_parallel.sh" --hosts node1,node2,node3 --ranks-per-node 1 \
    --model $staged/model.safetensors --input $staged/latents.txt --output "$work/repo/outputs/$1" \
    -- --device cpu --all-ranks "${format_args[@]}" > "$work/stdout" 2> "$work/stderr"
}
stage
start=$SECONDS
if staged_job staged; then
  if why=$(same_files "$work/repo/outputs" staged); then
    pass "the model and the latents staged in each node's own /tmp (3 nodes x 1 rank): identical to one process ($((SECONDS - start)) s)"
  else
    fail "inputs staged on each node" "$why"
  fi
else
  fail "inputs staged on each node" "exit status $?: $(tail -c 600 "$work/stderr")"
fi
staged_refusal() {  # staged_refusal NAME PATTERN: the job on the staged copies fails as it should
  local name=$1 pattern=$2 got
  staged_job refused
  got=$?
  if [ $got -ne 1 ]; then
    fail "$name" "exit status $got, expected 1: $(tail -c 600 "$work/stderr")"
  elif [ "$(grep -c '^facegen: error' "$work/stderr")" != 1 ] || ! grep -qE "$pattern" "$work/stderr"; then
    fail "$name" "not one line matching '$pattern': $(grep '^facegen' "$work/stderr" | head -n 3)"
  elif ls -A "$work/repo/outputs" | grep -q '^refused'; then
    fail "$name" "files left: $(ls -A "$work/repo/outputs" | grep '^refused' | paste -sd' ')"
  else
    pass "$name: exit 1, nothing written; $(grep '^facegen: error' "$work/stderr")"
  fi
}
size=$(stat -c %s models/facegen-faces.safetensors)
printf '\x55' | dd of="$VC_DIR/node2-tmp/facegen-staged/model.safetensors" bs=1 seek=$((size - 7)) conv=notrunc status=none
staged_refusal "node2's staged model with one byte changed" \
  "^facegen: error on rank 1 \(host node2\): the model file $staged/model\.safetensors opened here is not rank 0's \(host node1\): the same $(commas "$size") bytes but other contents \(XXH3-128 [0-9a-f]{4}\.\.\.[0-9a-f]{4} here, [0-9a-f]{4}\.\.\.[0-9a-f]{4} there\)$"
stage
head -n -1 "$work/repo/inputs/cluster40.txt" > "$VC_DIR/node2-tmp/facegen-staged/latents.txt"
short=$(stat -c %s "$VC_DIR/node2-tmp/facegen-staged/latents.txt")
staged_refusal "node2's staged latents one line short" \
  "^facegen: error on rank 1 \(host node2\): the latent file $staged/latents\.txt opened here is not rank 0's \(host node1\): $(commas "$short") bytes here, $(commas "$(stat -c %s "$work/repo/inputs/cluster40.txt")") there$"
for node in "${VC_NODES[@]}"; do rm -rf "$VC_DIR/$node-tmp/facegen-staged"; done

# --- failures on node2 -----------------------------------------------------------------------------
# Each job: 2 nodes x 2 ranks from node1, outputs in $work/share/out. The lines must name a rank of
# node2 (2 or 3) and node2.
mkdir -p "$work/share/out"
node2_line='^facegen: error on rank [23] \(host node2\)'

# start_job INPUT PREFIX [facegen flags]: the job in the background; $job is its pid.
start_job() {
  local input=$1 prefix=$2
  shift 2
  rm -rf "$work/share/out" && mkdir -p "$work/share/out"
  vc_exec node1 timeout 120 "$work/repo/run_parallel.sh" --hosts node1,node2 --ranks-per-node 2 \
    --input "$work/repo/inputs/$input.txt" --output "$work/share/out/$prefix" \
    -- --device cpu --all-ranks "${format_args[@]}" "$@" > "$work/stdout" 2> "$work/stderr" &
  job=$!
}

# finish_job NAME FAULT-TIME: waits for the job and judges how it ended.
finish_job() {
  local name=$1 fault_at=$2 status left took
  wait_pid "$job" 150
  status=$?
  job=
  took=$((SECONDS - fault_at))
  left=$(left_behind "$work/share/out")
  if [ $status -eq 0 ]; then
    fail "$name" "the job succeeded"
  elif [ $status -eq 124 ] || [ $took -gt 20 ]; then
    fail "$name" "the job took $took s to end (status $status): $(tail -c 400 "$work/stderr")"
  elif [ "$(grep -cE "$node2_line" "$work/stderr")" != 1 ]; then
    fail "$name" "not one line naming a rank of node2: $(tail -c 800 "$work/stderr")"
  elif [ -n "$left" ]; then
    fail "$name" "left behind: $left"
  else
    pass "$name: status $status, $took s, nothing left; $(grep -E "$node2_line" "$work/stderr")"
  fi
}

# wait_working SECONDS: until the job's temporary outputs exist, and a second more (ranks compute).
wait_working() {
  local tries
  for tries in $(seq $(($1 * 10))); do
    ls "$work/share/out" 2> /dev/null | grep -q '\.tmp-' && { sleep 1; return 0; }
    sleep 0.1
  done
  return 1
}

vc_hide node2 "$repo/models" || exit 1
start_job cluster40 nomodel
finish_job "node2 without the model file" $SECONDS
vc_unhide node2 "$repo/models"

vc_hide node2 "$work/share" || exit 1
start_job cluster40 nodir
finish_job "node2 without the output directory" $SECONDS
vc_unhide node2 "$work/share"

start_job cluster3000 killed --images-per-round 64
if wait_working 60; then
  victims=$(for pid in $(vc_pids node2); do [ "$(cat /proc/$pid/comm 2> /dev/null)" = facegen ] && echo "$pid"; done)
  if [ "$(echo $victims | wc -w)" = 2 ]; then
    kill -9 $victims
    finish_job "both ranks of node2 killed mid-run (SIGKILL)" $SECONDS
  else
    fail "ranks of node2 killed" "node2 runs $(echo $victims | wc -w) facegen processes, expected 2"
  fi
else
  fail "ranks of node2 killed" "the job did not start within 60 s: $(tail -c 400 "$work/stderr")"
fi
[ -n "$job" ] && { kill "$job"; wait_pid "$job" 30; job=; }

start_job cluster3000 unlinked --images-per-round 64
if wait_working 60; then
  vc_link node2 down
  finish_job "node2's link taken down mid-run" $SECONDS
  vc_link node2 up
else
  fail "node2's link down" "the job did not start within 60 s: $(tail -c 400 "$work/stderr")"
fi
[ -n "$job" ] && { kill "$job"; wait_pid "$job" 30; job=; }

# mpirun itself killed on node1 (SIGKILL) mid-run: run_parallel.sh returns only once nothing of the
# job runs on node1 (its ranks stop themselves, mpi/launcher_watch.hpp; the ssh client to node2 ends
# when node2's orted, which lost mpirun, has killed its ranks and left); within 5 s of its return
# nothing is left on any node, and no temporary, lock or output is left.
start_job cluster3000 mpirun-killed --images-per-round 64
if wait_working 60; then
  launcher=$(for pid in $(vc_pids node1); do [ "$(cat /proc/$pid/comm 2> /dev/null)" = mpirun ] && echo "$pid"; done)
  kill -9 $launcher
  fault_at=$SECONDS
  wait_pid "$job" 60
  status=$?
  job=
  here=$(vc_stray node1 "${VC_SSHD_PID[node1]}" | awk '$2 ~ /^(facegen|mpirun|orted|ssh)$/' | paste -sd' ')
  left=$(left_behind "$work/share/out")
  if [ $status -eq 0 ] || [ $status -eq 124 ]; then
    fail "mpirun killed (SIGKILL) on node1 mid-run" "status $status: $(tail -c 400 "$work/stderr")"
  elif [ -n "$here" ]; then
    fail "mpirun killed (SIGKILL) on node1 mid-run" "run_parallel.sh returned with processes of the job left on node1: $here"
  elif [ -n "$left" ]; then
    fail "mpirun killed (SIGKILL) on node1 mid-run" "left behind: $left"
  else
    pass "mpirun killed (SIGKILL) on node1 mid-run: status $status after $((SECONDS - fault_at)) s, nothing left on node1 at the return nor on any node after it: $(grep '^run_parallel: the job' "$work/stderr")"
  fi
else
  fail "mpirun killed on node1" "the job did not start within 60 s: $(tail -c 400 "$work/stderr")"
fi
[ -n "$job" ] && { kill "$job"; wait_pid "$job" 30; job=; }

# --- Slurm on the same nodes: the documented sbatch commands ----------------------------------------
slurm_part() {
  local tool why
  for tool in slurmctld slurmd sbatch sinfo scontrol munged munge unmunge; do
    command -v "$tool" > /dev/null || { echo "  Slurm part skipped: $tool is not installed (make test-deps installs slurm-wlm and munge)"; return 0; }
  done
  source tests/lib/slurm_cluster.sh
  if ! slurm_cluster_up "$work/slurm"; then
    echo "  Slurm part skipped: one slurmd per node would not start: $SLURM_CLUSTER_WHY"
    return 0
  fi
  echo "  Slurm $(sinfo --version | cut -d' ' -f2): slurmctld on node1, a slurmd on each of ${VC_NODES[*]}, each node declaring one GPU (gres) it does not have"
  rm -rf "$work/repo/outputs" && mkdir -p "$work/repo/outputs"
  submit "sbatch --nodes=2 --ntasks-per-node=2 slurm/facegen-cpu.sbatch (srun --mpi=pmix)" "srun --mpi=pmix" \
    slurm-srun --nodes=2 --ntasks-per-node=2 slurm/facegen-cpu.sbatch
  LAUNCHER=mpirun submit "LAUNCHER=mpirun sbatch --nodes=2 --ntasks-per-node=2 slurm/facegen-cpu.sbatch" "mpirun -np 4" \
    slurm-mpirun --nodes=2 --ntasks-per-node=2 slurm/facegen-cpu.sbatch
  no_gpu
  staged_from_elsewhere
  srun_killed
}

# staged_from_elsewhere: facegen's own flags, submitted from another folder by the script's path, with
# STAGE_DIR=/tmp (each node's own): 2 nodes x 2 ranks read the model and the latents from their node's
# copies (sbcast), the files are one process's, the copies are gone from every node after.
staged_from_elsewhere() {
  local name="STAGE_DIR=/tmp sbatch --nodes=2 --ntasks-per-node=2 REPO/slurm/facegen-cpu.sbatch --input ... --output ... from another folder"
  local id state tries log left node start=$SECONDS
  mkdir -p "$work/elsewhere"
  id=$(cd "$work/elsewhere" && STAGE_DIR=/tmp vc_exec node1 sbatch --parsable --nodes=2 --ntasks-per-node=2 \
         "$work/repo/slurm/facegen-cpu.sbatch" --input "$work/repo/inputs/cluster40.txt" --output "$work/repo/outputs/vc-staged" \
         --all-ranks "${format_args[@]}" 2> "$work/sbatch.out")
  for tries in $(seq 600); do
    state=$(vc_exec node1 scontrol show job -o "$id" 2> /dev/null)
    case $state in *JobState=PENDING*|*JobState=CONFIGURING*|*JobState=RUNNING*|*JobState=COMPLETING*|"") sleep 0.2 ;; *) break ;; esac
  done
  log=$work/elsewhere/facegen-$id.log
  left=$(for node in "${VC_NODES[@]}"; do ls -d "$VC_DIR/$node-tmp/facegen-$id" 2> /dev/null; done | paste -sd' ')
  if [[ $state != *JobState=COMPLETED* ]]; then
    fail "$name" "job '$id' $(cat "$work/sbatch.out"): ${state:0:160}; log: $(tail -n 6 "$log" 2> /dev/null)"
  elif ! why=$(same_files "$work/repo/outputs" vc-staged); then
    fail "$name" "$why"
  elif ! grep -q "^facegen-cpu: inputs staged in /tmp/facegen-$id on every node$" "$log" ||
       ! grep -q -- "--model /tmp/facegen-$id/model/facegen-faces.safetensors" "$log" ||
       ! grep -q -- "--input /tmp/facegen-$id/latents/cluster40.txt" "$log"; then
    fail "$name" "the log does not show the staged copies read: $(grep -E 'staged|--model' "$log" | head -n 3)"
  elif [ -n "$left" ]; then
    fail "$name" "staged copies left: $left"
  else
    pass "$name: identical to one process, read from each node's own copies, removed after ($((SECONDS - start)) s)"
  fi
}

# srun_killed: the CPU script's srun killed (SIGKILL) on node1 mid-run (2 nodes x 2 ranks): the job
# fails, run_parallel.sh has waited for the ranks of node1 and for the step (cancelled if it lingers),
# no temporary, lock or output is left, no rank runs on any node.
srun_killed() {
  local name="sbatch --nodes=2 --ntasks-per-node=2 slurm/facegen-cpu.sbatch, srun killed (SIGKILL) mid-run"
  local id state tries srun_pid stray log
  id=$(cd "$work/repo" && vc_exec node1 sbatch --parsable --nodes=2 --ntasks-per-node=2 slurm/facegen-cpu.sbatch \
         cluster3000 srun-killed --all-ranks --images-per-round 64 2> "$work/sbatch.out")
  log=$work/repo/facegen-$id.log
  for tries in $(seq 600); do ls "$work/repo/outputs" | grep -q '^srun-killed.*\.tmp-' && break; sleep 0.1; done
  sleep 1
  # The srun that run_parallel.sh started (srun forks a helper of its own, a child of it).
  srun_pid=$(for pid in $(vc_pids node1); do
               [ "$(cat /proc/$pid/comm 2> /dev/null)" = srun ] && [ "$(cat /proc/$(ps -o ppid= -p $pid | tr -d ' ')/comm 2> /dev/null)" != srun ] && echo "$pid"
             done | head -n 1)
  if [ -z "$srun_pid" ]; then
    fail "$name" "no srun on node1 (job '$id' $(cat "$work/sbatch.out")): $(tail -n 5 "$log" 2> /dev/null)"
    return
  fi
  kill -9 "$srun_pid"
  local start=$SECONDS
  for tries in $(seq 300); do
    state=$(vc_exec node1 scontrol show job -o "$id" 2> /dev/null)
    case $state in *JobState=RUNNING*|*JobState=COMPLETING*) sleep 0.2 ;; *) break ;; esac
  done
  stray=$(for node in "${VC_NODES[@]}"; do vc_stray "$node" | awk -v n="$node" '$2 ~ /^(facegen|srun|mpirun|orted)$/ { print n ": " $0 }'; done | paste -sd' ')
  if [[ $state != *JobState=FAILED* ]]; then
    fail "$name" "the job did not fail: ${state:0:200}; log: $(tail -n 5 "$log")"
  elif [ -n "$stray" ]; then
    fail "$name" "left running: $stray"
  elif [ -n "$(ls -A "$work/repo/outputs" | grep '^srun-killed\|^\.facegen')" ]; then
    fail "$name" "left: $(ls -A "$work/repo/outputs" | grep '^srun-killed\|^\.facegen' | paste -sd' ')"
  else
    pass "$name: the job failed $((SECONDS - start)) s later, nothing left on any node; $(grep -E '^run_parallel: (srun ended|the job)' "$log" | paste -sd' ')"
  fi
}

# sbatch_wait [sbatch arguments]: sbatch on node1 from the repository; prints the job id, waits for
# the job (polling every 0.2 s: sbatch --wait polls every few seconds) and returns its exit code.
sbatch_wait() {
  local id state tries
  id=$(cd "$work/repo" && vc_exec node1 sbatch --parsable "$@") || return 1
  echo "$id"
  for tries in $(seq 600); do
    state=$(vc_exec node1 scontrol show job -o "$id" 2> /dev/null)
    case $state in
      *JobState=PENDING*|*JobState=CONFIGURING*|*JobState=RUNNING*|*JobState=COMPLETING*) sleep 0.2 ;;
      *JobState=*) break ;;
      *) sleep 0.2 ;;
    esac
  done
  case $state in
    *JobState=COMPLETED*) return 0 ;;
    *" ExitCode="*) state=${state##* ExitCode=}; return $((${state%%:*} ? ${state%%:*} : 1)) ;;
    *) return 124 ;;
  esac
}

# submit NAME LAUNCH-TEXT OUTPUT [sbatch flags] SCRIPT: the job on cluster40 with every format, from
# node1 in the repository; its files must match one process's and its ranks sit 2 per node.
submit() {
  local name=$1 launch=$2 output=$3 log job layout want="0/node1/0/2 1/node1/1/2 2/node2/0/2 3/node2/1/2"
  shift 3
  local start=$SECONDS
  sbatch_wait "$@" cluster40 "$output" --all-ranks --verbose "${format_args[@]}" > "$work/sbatch.out" 2>&1
  local status=$?
  job=$(head -n1 "$work/sbatch.out" | tr -dc 0-9)
  log=$work/repo/facegen-$job.log
  layout=$(verbose_layout "$log" 2> /dev/null)
  job=
  if [ $status -ne 0 ]; then
    fail "$name" "the job's status $status; $(cat "$work/sbatch.out"); log: $(tail -n 8 "$log" 2> /dev/null)"
  elif ! grep -q "$launch" "$log"; then
    fail "$name" "the log does not show '$launch': $(head -n 4 "$log")"
  elif ! why=$(same_files "$work/repo/outputs" "$output"); then
    fail "$name" "$why"
  elif [ "$layout" != "$want" ]; then
    fail "$name, --verbose" "rank/host/local rank/local ranks '$layout', expected '$want'"
  else
    pass "$name: identical to one process; ranks $layout ($((SECONDS - start)) s)"
  fi
}

# no_gpu: the GPU script on nodes whose GPU is not usable fails at once with one line naming rank
# and host, and writes nothing.
no_gpu() {
  local name="sbatch --nodes=2 --gpus-per-node=1 slurm/facegen-multi-node.sbatch on nodes without a usable GPU"
  local start=$SECONDS log job status line
  sbatch_wait --nodes=2 --ntasks-per-node=1 --gpus-per-node=1 slurm/facegen-multi-node.sbatch cluster40 gpu \
    > "$work/sbatch.out" 2>&1
  status=$?
  job=$(head -n1 "$work/sbatch.out" | tr -dc 0-9)
  log=$work/repo/facegen-$job.log
  line=$(grep -E '^facegen: error on rank [0-9]+ \(host node[12]\)' "$log" 2> /dev/null | head -n1)
  if [ $status -eq 0 ] || [ $status -eq 124 ]; then
    fail "$name" "the job's status $status; log: $(tail -n 6 "$log" 2> /dev/null)"
  elif [ -z "$line" ]; then
    fail "$name" "no line naming rank and host: $(tail -n 6 "$log" 2> /dev/null)"
  elif ls "$work/repo/outputs" | grep -q '^gpu'; then
    fail "$name" "left files: $(ls "$work/repo/outputs" | grep '^gpu' | paste -sd' ')"
  else
    pass "$name: failed in $((SECONDS - start)) s, nothing written; $line"
  fi
}

slurm_part

suite_end
