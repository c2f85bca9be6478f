# suite.sh: what every test suite prints and how it ends, sourced by tests/test_cli.sh and tests/suites/*.sh.
#
#   . tests/lib/suite.sh NAME       NAME begins the summary line ("NAME: 3 passed, 0 failed") unless
#                                   suite_end --bare leaves it out
#
# One line per case ("  ok    NAME", "  FAIL  NAME: WHY", "  skip  NAME"), then suite_end prints the
# summary and gives the exit status tests/run_all.sh reads: 0 all passed, 1 a case failed; skip_suite
# ends a suite that cannot run here with 77 and one line saying why; wait_pid waits with a deadline;
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
descendant_pids() {
  local frontier=$1 next pid
  while [ -n "$frontier" ]; do
    next=
    for pid in $frontier; do
      [ "$pid" = "$1" ] || echo "$pid"
      next="$next $(ps -o pid= --ppid "$pid" 2> /dev/null | tr '\n' ' ')"
    done
    frontier=$(echo $next)
  done
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
