# suite.sh: what every test suite prints and how it ends, sourced by tests/test_cli.sh and tests/suites/*.sh.
#
#   . tests/lib/suite.sh NAME       NAME begins the summary line ("NAME: 3 passed, 0 failed") unless
#                                   suite_end --bare leaves it out
#
# One line per case ("  ok    NAME", "  FAIL  NAME: WHY", "  skip  NAME"), then suite_end prints the
# summary and gives the exit status tests/run_all.sh reads: 0 all passed, 1 a case failed; skip_suite
# ends a suite that cannot run here with 77 and one line saying why; tally counts a client's PASS and
# FAIL lines as cases; wait_pid waits with a deadline;
# free_ports finds ports for daemons that cannot take port 0; spare_uid a user of the suite's own;
# nap pauses a poll without starting a process, has_line looks into a file and stopped at a process
# without one;
# deadline runs a command with one; descendant_pids lists a process's children and theirs; on_exit
# (tests/lib/on_exit.sh) removes a suite's scratch files.
. tests/lib/on_exit.sh
suite_name=$1
passed=0
failed=0
skipped=0
pass() { echo "  ok    $1"; passed=$((passed + 1)); }
fail() { echo "  FAIL  $1: $2"; failed=$((failed + 1)); }
skip() { echo "  skip  $1"; skipped=$((skipped + 1)); }

# tally: the lines of a client (a Python script's stdout, on stdin) as this suite's cases: "PASS NAME"
# passes, "FAIL NAME|WHY" fails, "INFO TEXT" is printed as an info line, anything else as it came.
tally() {
  local line
  while IFS= read -r line; do
    case $line in
      PASS\ *) pass "${line#PASS }" ;;
      FAIL\ *) fail "${line#FAIL }" "" ;;
      INFO\ *) echo "  info  ${line#INFO }" ;;
      *) echo "  ....  $line" ;;
    esac
  done
}

# wait_pid PID SECONDS: waits for PID, a child of this shell, at most SECONDS; its exit status. Past
# the deadline it says so on stderr, kills PID and its children (SIGTERM, then SIGKILL 5 s later)
# and returns 124, so a case fails instead of hanging its suite.
wait_pid() {
  local pid=$1 limit=$2
  if ! timeout "$limit" tail -s 0.05 --pid="$pid" -f /dev/null; then
    echo "wait_pid: process $pid still running after $limit s: killed" >&2
    pkill -TERM -P "$pid" 2> /dev/null; kill -TERM "$pid" 2> /dev/null
    timeout 5 tail -s 0.05 --pid="$pid" -f /dev/null || { pkill -KILL -P "$pid"; kill -KILL "$pid"; } 2> /dev/null
    wait "$pid" 2> /dev/null
    return 124
  fi
  wait "$pid"
}

# deadline SECONDS COMMAND...: runs COMMAND in the foreground with default signal dispositions and at
# most SECONDS (then SIGTERM, and SIGKILL 5 s later); its exit status. Past the deadline it says so on
# stderr, naming the command, counts a failure that suite_end names again (stderr may go to a file the
# case reads) and returns 124, so a hung command fails its suite instead of hanging it.
deadlines_missed=()
deadline() {
  local limit=$1 start=$SECONDS status
  shift
  env --default-signal timeout -k 5 "$limit" "$@"
  status=$?
  if [ $status -eq 124 ] || { [ $status -eq 137 ] && [ $((SECONDS - start)) -ge "$limit" ]; }; then
    echo "deadline: still running after $limit s, stopped: $*" >&2
    deadlines_missed+=("still running after $limit s, stopped: $*")
    failed=$((failed + 1))
    return 124
  fi
  return $status
}

# descendant_pids PID: the pids below PID (not PID itself), breadth first: parents before children.
# Read from /proc/PID/task/TID/children, without starting a process (a poll that ran ps for each
# level cost more CPU than the runs it waited for); ps where the kernel does not list children.
descendant_pids() {
  local frontier=$1 next pid task kids
  if [ ! -e "/proc/$$/task/$$/children" ]; then
    while [ -n "$frontier" ]; do
      next=
      for pid in $frontier; do
        [ "$pid" = "$1" ] || echo "$pid"
        next="$next $(ps -o pid= --ppid "$pid" 2> /dev/null | tr '\n' ' ')"
      done
      frontier=$next
      [[ $frontier = *[0-9]* ]] || frontier=
    done
    return 0
  fi
  while [ -n "$frontier" ]; do
    next=
    for pid in $frontier; do
      [ "$pid" = "$1" ] || echo "$pid"
      for task in /proc/"$pid"/task/*/children; do
        kids=
        read -r kids < "$task" 2> /dev/null  # one line without a newline: read says 1, yet reads it
        next="$next $kids"
      done
    done
    frontier=$next
    [[ $frontier = *[0-9]* ]] || frontier=
  done
}

# nap SECONDS: a pause that starts no process (a poll that ran sleep(1) fifty times a second spent
# more CPU starting it than the runs it waited for took): a read that times out, on a pipe this
# shell holds open at both ends, so that nothing ever arrives.
nap() {
  [ -n "${nap_fd:-}" ] || exec {nap_fd}<> <(:)
  read -r -t "$1" -u "$nap_fd" _
  return 0
}

# has_line FILE PREFIX: whether a line of FILE begins with PREFIX, read by this shell (for a poll:
# grep would be a process a look).
has_line() {
  local line
  [ -r "$1" ] || return 1
  # (A process's /proc file read as it is reaped fails with ESRCH: said nowhere, it is not stopped.)
  while IFS= read -r line || [ -n "$line" ]; do [[ $line == "$2"* ]] && return 0; done < "$1" 2> /dev/null
  return 1
}

# stopped PID: whether process PID is stopped (State T in /proc/PID/status), read by this shell.
stopped() { has_line "/proc/$1/status" $'State:\tT'; }

# free_ports N: N TCP ports that no process holds now, on one line (the kernel's choice for sockets
# bound to port 0, all held until all are chosen), for a daemon that cannot take port 0 itself.
free_ports() {
  /usr/bin/python3 -c 'import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held: s.bind(("", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))' "$1"
}

# spare_uid: a user id that no account has and no process runs as, this suite's alone while it runs
# (from its pid), for a case run as another user whose limit counts that user's processes (ulimit -u):
# nobody (65534) may be another suite's other user at the same moment.
spare_uid() {
  local uid=$((1000000 + $$))
  while getent passwd "$uid" > /dev/null || [ -n "$(ps -o pid= -u "$uid" 2> /dev/null)" ]; do uid=$((uid + 4194304)); done
  echo "$uid"
}

# skip_suite WHY...: "NAME: skipped: WHY", exit 77.
skip_suite() {
  echo "$suite_name: skipped: $*"
  exit 77
}

# suite_end [--bare] [--skipped]: "[NAME: ]P passed, F failed[, S skipped]"; status 0 when nothing
# failed, else 1.
suite_end() {
  local prefix="$suite_name: " counts="$passed passed, $failed failed"
  [ "${1:-}" = --bare ] && { prefix=; shift; }
  [ "${1:-}" = --skipped ] && counts="$counts, $skipped skipped"
  local missed
  for missed in "${deadlines_missed[@]}"; do echo "  FAIL  $missed"; done
  echo "$prefix$counts"
  [ "$failed" -eq 0 ]
}

# earlier_output EXT TAG: on stdout, an earlier run's output as a new run may replace it: bytes that
# begin as facegen's files of that kind begin (commit/existing_outputs.hpp: txt, bmp, npy, u8.npy, tar,
# png, json),
# then TAG, which tells one such file from another. facegen refuses to replace anything else.
earlier_output() {
  local tag=$2 size
  case $1 in
    txt) printf '1\n0.0000 %s\n' "$tag" ;;
    bmp)
      size=$((54 + ${#tag}))
      printf 'BM'
      printf "\\x$(printf %02x $((size & 255)))\\x$(printf %02x $((size >> 8 & 255)))\\x$(printf %02x $((size >> 16 & 255)))\\x00"
      printf '\x00\x00\x00\x00\x36\x00\x00\x00\x28\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x18\x00'
      printf '\x00%.0s' {1..24}
      printf '%s' "$tag" ;;
    npy)
      local dict="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 64, 64, 3), }"
      printf '\x93NUMPY\x01\x00\x36\x00%-53s\n%s' "$dict" "$tag" ;;
    u8.npy)
      local dict="{'descr': '|u1', 'fortran_order': False, 'shape': (1, 64, 64, 3), }"
      printf '\x93NUMPY\x01\x00\x36\x00%-53s\n%s' "$dict" "$tag" ;;
    tar)  # a ustar header's name and magic (its checksum is not what facegen looks at)
      printf '000000000.png'; printf '\x00%.0s' {1..244}; printf 'ustar\x0000'; printf '\x00%.0s' {1..247}
      printf '%s' "$tag" ;;
    png) printf '\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR%s' "$tag" ;;
    json) printf '{\n  "program": {"tag": "%s"}}\n' "$tag" ;;
    *) echo "earlier_output: unknown kind $1" >&2; return 1 ;;
  esac
}
