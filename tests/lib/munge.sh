# munge.sh: a munged of the suite's own, for the Slurm suites (sourced, not run).
#
# Slurm authenticates with munge. The system's munged (/run/munge) is shared by every process of the
# machine: a suite that started it and stopped it at its end took it from under another suite still
# running. So each suite starts its own, as the munge user, with its socket, pid file, log and seed
# in a folder of its own, and points Slurm at that socket (slurm.conf: AuthInfo=socket=PATH; the
# munge and unmunge commands: -S PATH). A socket is a file: it reaches every node of a virtual
# cluster, whose nodes share the file system.
#
#   munge_start DIR   makes DIR (owned by munge) and starts munged there; MUNGE_SOCKET is its socket.
#                     Non-zero, with the reason on stdout, when it cannot start or does not answer.
#   munge_stop        stops it (by its pid) and waits for it, 5 s at most; idempotent
# Needs root, munged, munge, unmunge and the munge package's /etc/munge/munge.key.

MUNGE_SOCKET=
MUNGE_DIR=

munge_start() {
  MUNGE_DIR=$1
  [ -f /etc/munge/munge.key ] || { echo "/etc/munge/munge.key is missing (the munge package makes it)"; return 1; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  mkdir -p "$MUNGE_DIR" && chown munge:munge "$MUNGE_DIR" && chmod 755 "$MUNGE_DIR" || return 1
  MUNGE_SOCKET=$MUNGE_DIR/socket
  runuser -u munge -- munged --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_DIR/munged.pid" \
    --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" > "$MUNGE_DIR/munged.out" 2>&1 ||
    { echo "munged would not start: $(cat "$MUNGE_DIR/munged.out" "$MUNGE_DIR/munged.log" 2> /dev/null | tail -n 3)"; return 1; }
  local tries
  for tries in $(seq 100); do
    munge -S "$MUNGE_SOCKET" -n 2> /dev/null | unmunge -S "$MUNGE_SOCKET" > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "munged started but does not answer on $MUNGE_SOCKET"
  return 1
}

munge_stop() {
  [ -n "$MUNGE_DIR" ] && [ -s "$MUNGE_DIR/munged.pid" ] || return 0
  local pid tries
  pid=$(cat "$MUNGE_DIR/munged.pid")
  kill "$pid" 2> /dev/null
  for tries in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.05; done
  MUNGE_DIR=
}
