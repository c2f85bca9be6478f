# virtual_cluster.sh: a cluster of nodes on one machine, for tests that need more than one host.
#
# Sourced, not run. A node is a process ("keeper") that holds a network, UTS and mount namespace of
# its own: its own host name (node1, node2, ...), its own address on a private test subnet, and an
# /etc/hosts that names every node. The mount namespace is a slave of this machine's, so every node
# sees the same files at the same paths (the way cluster nodes share a parallel file system), except
# /tmp: each node has its own, DIR/NODE-tmp, as cluster nodes do (Slurm's PMIx plugin names its
# per-step directory there by job and step alone, so two nodes cannot share one). A test may mount
# something on one node alone (vc_hide). The nodes' veth links meet on a bridge
# inside a further namespace ("switch"), so no address, route or packet of the test subnet ever
# reaches this machine's own network namespace. Each node can run an sshd (vc_start_sshd) that lets
# root in with a key made here, for mpirun's ssh launcher.
#
# Everything lives in $VC_DIR and in processes below the keepers: vc_down kills every process in
# each node's namespaces, after which the kernel removes the namespaces and their links.
#
#   vc_up N DIR          make nodes node1..nodeN; DIR (empty, absolute, not under /tmp) receives keys,
#                        configs, logs and the nodes' /tmp; VC_SHARED_PATHS (under /tmp) stay shared
#   vc_exec NODE CMD...  run CMD on NODE (in its namespaces), in the current directory
#   vc_pids NODE         the pids of the processes on NODE, keeper excluded
#   vc_start_sshd NODE   an sshd on NODE's address; vc_ssh_config is the client config for it
#   vc_up_for_mpi N DIR  vc_up, an sshd on every node (pids in VC_SSHD_PID), and mpirun's ssh launcher
#                        pointed at them (OMPI_MCA_plm_rsh_agent); says on stderr what failed
#   vc_link NODE up|down the node's network link
#   vc_hide NODE PATH    an empty directory mounted over PATH on NODE alone (vc_unhide to undo)
#   vc_down              stop everything, remove the links and namespaces (call it from a trap)
# Needs root, unshare, nsenter, ip; sshd and ssh-keygen for vc_start_sshd.

VC_SUBNET=10.250.77            # a /24 of the private 10/8 range that exists only inside the nodes
VC_NODES=()                    # node names, node1..nodeN
VC_SHARED_PATHS=()             # set before vc_up: paths under /tmp that every node sees as they are
declare -A VC_KEEPER=()        # node name -> pid of the process that holds its namespaces
VC_SWITCH=                     # pid that holds the bridge's namespace
VC_DIR=
declare -A VC_SSHD_PID=()      # node name -> pid of its sshd (vc_up_for_mpi)

vc_address() { echo "$VC_SUBNET.$((${1#node} + 10))"; }

# vc_keeper NAME HOSTNAME: a process in new namespaces; prints its pid once they exist.
vc_keeper() {
  local ready=$VC_DIR/$1.ready
  unshare --net --uts --mount --propagation slave \
    bash -c 'hostname "$1" && touch "$2" && exec sleep infinity' keeper "$2" "$ready" < /dev/null > /dev/null 2>&1 &
  local tries
  for tries in $(seq 100); do [ -f "$ready" ] && break; sleep 0.05; done
  [ -f "$ready" ] || { echo "virtual cluster: could not make the namespaces of $1" >&2; return 1; }
  echo $!
}

vc_up() {
  local count=$1 i node addr
  VC_DIR=$2
  case $VC_DIR in /tmp/*) echo "virtual cluster: $VC_DIR is under /tmp, which each node has its own of" >&2; return 1 ;; esac
  mkdir -p "$VC_DIR"
  for i in $(seq "$count"); do VC_NODES+=("node$i"); done
  {
    echo "127.0.0.1 localhost"
    for node in "${VC_NODES[@]}"; do echo "$(vc_address "$node") $node"; done
  } > "$VC_DIR/hosts"
  VC_SWITCH=$(vc_keeper switch vc-switch) || return 1
  nsenter -t "$VC_SWITCH" --net ip link add vc-br type bridge || return 1
  nsenter -t "$VC_SWITCH" --net ip link set vc-br up || return 1
  for node in "${VC_NODES[@]}"; do
    VC_KEEPER[$node]=$(vc_keeper "$node" "$node") || return 1
    addr=$(vc_address "$node")
    # The pair is made in the switch's namespace and one end is moved into the node's.
    nsenter -t "$VC_SWITCH" --net ip link add "vc-$node" type veth peer name eth0 netns "${VC_KEEPER[$node]}" || return 1
    nsenter -t "$VC_SWITCH" --net ip link set "vc-$node" master vc-br up || return 1
    vc_exec "$node" mount --bind "$VC_DIR/hosts" /etc/hosts || return 1
    mkdir -p "$VC_DIR/$node-tmp" && chmod 1777 "$VC_DIR/$node-tmp"
    # Paths under /tmp that every node must still see (a repository cloned there) are bound into the
    # node's own /tmp at the same place before it covers the machine's.
    local shared rel
    for shared in "${VC_SHARED_PATHS[@]}"; do
      case $shared in /tmp/?*) ;; *) continue ;; esac
      rel=${shared#/tmp/}
      mkdir -p "$VC_DIR/$node-tmp/$rel" || return 1
      vc_exec "$node" mount --bind "$shared" "$VC_DIR/$node-tmp/$rel" || return 1
    done
    vc_exec "$node" mount --rbind "$VC_DIR/$node-tmp" /tmp || return 1
    vc_exec "$node" ip link set lo up || return 1
    vc_exec "$node" ip addr add "$addr/24" dev eth0 || return 1
    vc_exec "$node" ip link set eth0 up || return 1
  done
}

vc_exec() {
  local node=$1
  shift
  nsenter -t "${VC_KEEPER[$node]:?no node $node}" --net --uts --mount --wd="$(pwd)" "$@"
}

vc_pids() {
  local keeper=${VC_KEEPER[$1]:?no node $1} net
  net=$(readlink "/proc/$keeper/ns/net") || return 1
  # one listing of every process's network namespace: /proc/PID/ns/net -> net:[INODE]
  ls -l /proc/[0-9]*/ns/net 2> /dev/null |
    awk -v net="$net" -v keeper="$keeper" '$NF == net { split($(NF - 2), p, "/"); if (p[3] != keeper) print p[3] }'
}

# vc_stray NODE [PID...]: processes on NODE other than the given daemons, as "pid name" lines.
vc_stray() {
  local node=$1 pid
  shift
  local keep=" $* "
  for pid in $(vc_pids "$node"); do
    case $keep in *" $pid "*) continue ;; esac
    echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null)"
  done
}

vc_ssh_config() { echo "$VC_DIR/ssh/config"; }

# vc_ssh_keys: the client key, each node's host key, known_hosts and the client config (once).
vc_ssh_keys() {
  local ssh=$VC_DIR/ssh node
  [ -f "$ssh/config" ] && return 0
  mkdir -p "$ssh" && chmod 700 "$ssh"
  ssh-keygen -q -t ed25519 -N '' -C facegen-test -f "$ssh/id_ed25519" || return 1
  cp "$ssh/id_ed25519.pub" "$ssh/authorized_keys"
  : > "$ssh/known_hosts"
  for node in "${VC_NODES[@]}"; do
    ssh-keygen -q -t ed25519 -N '' -C "$node" -f "$ssh/$node-host" || return 1
    echo "$node,$(vc_address "$node") $(cut -d' ' -f1,2 "$ssh/$node-host.pub")" >> "$ssh/known_hosts"
  done
  # Plain client settings, as a site's would be: a lost node is found by mpirun's own keepalive
  # (run_parallel.sh), not by ssh's.
  cat > "$ssh/config" <<EOF
Host node*
  User root
  IdentityFile $ssh/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $ssh/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
EOF
}

vc_start_sshd() {
  local node=$1 ssh=$VC_DIR/ssh addr
  addr=$(vc_address "$node")
  vc_ssh_keys || return 1
  # ClientAlive*: the session of a launcher that can no longer be reached ends within seconds.
  # sshd's privilege separation directory. Once made it stays (as the openssh-server package's own
  # would): another suite's cluster may be using it.
  [ -d /run/sshd ] || { mkdir -p /run/sshd && chmod 755 /run/sshd; }
  cat > "$ssh/sshd-$node.conf" <<EOF
ListenAddress $addr
HostKey $ssh/$node-host
PidFile $VC_DIR/$node-sshd.pid
AuthorizedKeysFile $ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
ClientAliveInterval 1
ClientAliveCountMax 3
LogLevel ERROR
EOF
  vc_exec "$node" /usr/sbin/sshd -f "$ssh/sshd-$node.conf" -E "$VC_DIR/$node-sshd.log" || return 1
  local tries
  for tries in $(seq 50); do [ -s "$VC_DIR/$node-sshd.pid" ] && break; sleep 0.1; done
  [ -s "$VC_DIR/$node-sshd.pid" ]
}

vc_up_for_mpi() {
  vc_up "$1" "$2" || { echo "the virtual nodes could not be made (see above)" >&2; return 1; }
  local node
  for node in "${VC_NODES[@]}"; do
    vc_start_sshd "$node" || { echo "sshd would not start on $node: $(cat "$VC_DIR/$node-sshd.log" 2> /dev/null)" >&2; return 1; }
    VC_SSHD_PID[$node]=$(cat "$VC_DIR/$node-sshd.pid")
  done
  export OMPI_MCA_plm_rsh_agent="ssh -F $(vc_ssh_config)"
}

vc_link() { nsenter -t "$VC_SWITCH" --net ip link set "vc-$1" "$2"; }

vc_hide() {
  mkdir -p "$VC_DIR/empty"
  vc_exec "$1" mount --bind "$VC_DIR/empty" "$2"
}
vc_unhide() { vc_exec "$1" umount "$2"; }

# vc_down: every process in a node's namespaces, then the keepers; idempotent.
vc_down() {
  local node pid pids round
  for node in "${VC_NODES[@]}"; do
    [ -n "${VC_KEEPER[$node]:-}" ] && [ -d "/proc/${VC_KEEPER[$node]}" ] || continue
    for round in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(vc_pids "$node")
      [ -z "$pids" ] && break
      # TERM first (daemons remove their pid files), KILL for what is left
      if [ $round -le 5 ]; then kill $pids 2>/dev/null; else kill -9 $pids 2>/dev/null; fi
      sleep 0.2
    done
  done
  for pid in "${VC_KEEPER[@]}" $VC_SWITCH; do
    kill -9 "$pid" 2>/dev/null
  done
  for pid in "${VC_KEEPER[@]}" $VC_SWITCH; do
    while [ -d "/proc/$pid" ]; do sleep 0.05; done
  done
  VC_KEEPER=()
  VC_SWITCH=
  VC_NODES=()
  return 0
}
