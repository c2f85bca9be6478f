# slurm_cluster.sh: one Slurm cluster over the nodes of tests/lib/virtual_cluster.sh.
#
# Sourced after virtual_cluster.sh and vc_up. slurmctld runs on node1 (the login and head node), one
# slurmd on every node, each in its node's namespaces and so under its node's host name and address
# (NodeName=nodeN NodeAddr=10.250.77.1N); configuration, state, spool directories, pid files and
# logs live in DIR. Authentication is munge's: a munged of the cluster's own (tests/lib/munge.sh),
# whose socket is a file in DIR and so reaches every node.
#
#   slurm_cluster_up DIR      start it; returns non-zero with the reason in $SLURM_CLUSTER_WHY if it cannot
#   slurm_cluster_down        cancel every job and stop the daemons it started, by pid
# SLURM_CONF is exported for the clients (sbatch, sinfo, scontrol), which the test runs on node1.

SLURM_CLUSTER_DIR=
SLURM_CLUSTER_WHY=
. tests/lib/munge.sh

slurm_write_conf() {
  local dir=$SLURM_CLUSTER_DIR node
  cat > "$dir/slurm.conf" <<CONF
ClusterName=facegenvc
SlurmctldHost=node1($(vc_address node1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/%n/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/%n/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/%n/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
GresTypes=gpu
CONF
  # Each node declares one GPU, with no device file behind it: the GPU scripts are accepted and
  # scheduled, and their ranks then find no usable GPU, as on a node whose GPU is gone.
  mknod "$dir/fake-nvidia0" c 1 3  # /dev/null's numbers: Slurm wants a character device
  echo "Name=gpu File=$dir/fake-nvidia0" > "$dir/gres.conf"
  for node in "${VC_NODES[@]}"; do
    echo "NodeName=$node NodeAddr=$(vc_address "$node") CPUs=$(nproc) Gres=gpu:1 State=UNKNOWN" >> "$dir/slurm.conf"
  done
  echo "PartitionName=debug Nodes=$(IFS=,; echo "${VC_NODES[*]}") Default=YES State=UP OverSubscribe=YES" >> "$dir/slurm.conf"
}

slurm_cluster_up() {
  SLURM_CLUSTER_DIR=$1
  SLURM_CLUSTER_WHY=$(mktemp "$SLURM_CLUSTER_DIR.why.XXXXXX") || return 1
  slurm_cluster_start > "$SLURM_CLUSTER_WHY"
  local status=$?
  SLURM_CLUSTER_WHY=$(cat "$SLURM_CLUSTER_WHY" && rm -f "$SLURM_CLUSTER_WHY")
  return $status
}

# slurm_cluster_start: slurm_cluster_up's work; says on stdout why it failed.
slurm_cluster_start() {
  local node tries idle
  mkdir -p "$SLURM_CLUSTER_DIR/state"
  for node in "${VC_NODES[@]}"; do mkdir -p "$SLURM_CLUSTER_DIR/$node/spool"; done
  munge_start "$SLURM_CLUSTER_DIR/munge" || return 1
  slurm_write_conf
  export SLURM_CONF=$SLURM_CLUSTER_DIR/slurm.conf
  vc_exec node1 slurmctld -f "$SLURM_CONF" > "$SLURM_CLUSTER_DIR/slurmctld.out" 2>&1 ||
    { echo "slurmctld would not start: $(tail -n 3 "$SLURM_CLUSTER_DIR/slurmctld.log" "$SLURM_CLUSTER_DIR/slurmctld.out" 2> /dev/null)"; return 1; }
  for node in "${VC_NODES[@]}"; do
    vc_exec "$node" slurmd -f "$SLURM_CONF" > "$SLURM_CLUSTER_DIR/$node/slurmd.out" 2>&1 ||
      { echo "slurmd would not start on $node: $(tail -n 3 "$SLURM_CLUSTER_DIR/$node/slurmd.log" "$SLURM_CLUSTER_DIR/$node/slurmd.out" 2> /dev/null)"; return 1; }
  done
  for tries in $(seq 60); do
    idle=$(vc_exec node1 sinfo -h -o '%n %T' 2> /dev/null | awk '$2 == "idle"' | wc -l)
    [ "$idle" = "${#VC_NODES[@]}" ] && return 0
    sleep 0.5
  done
  echo "the nodes did not become idle within 30 s: $(vc_exec node1 sinfo -h -o '%n %T' 2>&1 | paste -sd' '); $(tail -n 2 "$SLURM_CLUSTER_DIR"/node*/slurmd.log 2> /dev/null)"
  return 1
}

slurm_cluster_down() {
  [ -n "$SLURM_CLUSTER_DIR" ] || return 0
  local pidfile pid tries
  [ -f "$SLURM_CLUSTER_DIR/slurm.conf" ] && [ -n "${VC_KEEPER[node1]:-}" ] &&
    vc_exec node1 scancel --quiet --user=root 2> /dev/null
  for pidfile in "$SLURM_CLUSTER_DIR"/node*/slurmd.pid "$SLURM_CLUSTER_DIR/slurmctld.pid"; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2> /dev/null
    for tries in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  done
  munge_stop
  SLURM_CLUSTER_DIR=
}
