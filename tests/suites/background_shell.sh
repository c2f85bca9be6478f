#!/usr/bin/env bash
# background_shell.sh: the suites that interrupt their runs pass when make test starts from a shell
# that ignores SIGINT, SIGQUIT and SIGHUP.
#
# A command started in the background of a script (make test &), under nohup, or by a CI runner's
# background step inherits SIGINT and SIGQUIT ignored (nohup adds SIGHUP), and facegen keeps an
# ignored signal ignored, as it should. A suite that interrupts its runs must start them with every
# signal at its default (env --default-signal), or its SIGINT does nothing and the suite waits: it
# once waited for ever while the run it meant to stop filled /tmp. This runs bounded_memory.sh and
# progress_summary.sh (both interrupt runs with SIGINT) in the background under
# nohup bash -c 'trap "" INT QUIT; ...', checks that the dispositions the suite started with were the
# ignored ones (the case could not fail otherwise), and gives each a deadline, after which every
# process of its session is killed (MPI ranks sit in process groups of their own, and a run that
# ignores SIGINT writes until it is stopped). The two run side by side, and each one's whole output
# is shown: this is where make test runs them (their headers say "# runner: inside
# background_shell"), as their cases pass or fail alike with those signals ignored or not: every run
# they signal starts with default dispositions. Usage: background_shell.sh [build]; exit 0 pass, 1 fail.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh background_shell
build=${1:-build}
[ -x "$build/facegen" ] || { echo "background_shell: $build/facegen is missing (run make)"; exit 1; }
command -v nohup > /dev/null || skip_suite "nohup is not installed"

work=$(mktemp -d /tmp/facegen-background.XXXXXX)
on_exit 'rm -rf "$work"'

# ignoring STATE SECONDS COMMAND...: COMMAND in the background, in a session of its own, with SIGHUP,
# SIGINT and SIGQUIT ignored; its exit status, or 124 once SECONDS have passed, when every process of
# the session is stopped (SIGTERM, then SIGKILL). The shell writes the ignored-signal mask COMMAND inherits into STATE.mask
# and its session id into STATE.sid first. (Not under timeout, which catches those signals and so
# would set them back to their defaults in COMMAND.)
ignoring() {
  local state=$1 seconds=$2 pid sid
  shift 2
  nohup setsid -w bash -c 'trap "" INT QUIT; sed -n "s/^SigIgn:[[:space:]]*//p" /proc/self/status > "$0.mask"
                        ps -o sid= -p $$ | tr -d " " > "$0.sid"; exec "$@"' "$state" "$@" &
  pid=$!
  if ! timeout "$seconds" tail -s 0.1 --pid=$pid -f /dev/null; then
    # SIGTERM first, so that the suite's own clean-up removes its work folder, then SIGKILL.
    sid=$(cat "$state.sid" 2> /dev/null)
    [ -n "$sid" ] && pkill -TERM -s "$sid"
    timeout 10 tail -s 0.1 --pid=$pid -f /dev/null
    [ -n "$sid" ] && pkill -KILL -s "$sid"
    kill -KILL $pid 2> /dev/null
    wait $pid 2> /dev/null
    return 124
  fi
  wait $pid
}

echo "suites started from a shell that ignores SIGHUP, SIGINT and SIGQUIT (nohup, trap '' INT QUIT), side by side:"
names=(bounded_memory progress_summary)
for name in "${names[@]}"; do
  (
    start=$SECONDS
    ignoring "$work/$name" 150 bash "tests/suites/$name.sh" "$build" > "$work/$name.log" 2>&1 < /dev/null
    echo "$? $((SECONDS - start))" > "$work/$name.status"
  ) &
done
wait
for name in "${names[@]}"; do
  read -r status took < "$work/$name.status" || { status=1; took=?; }
  echo "--- $name, with those signals ignored:"
  cat "$work/$name.log"
  mask=$(cat "$work/$name.mask" 2> /dev/null)
  # Bits 0, 1, 2: SIGHUP, SIGINT, SIGQUIT.
  if [ -z "$mask" ] || [ $((0x$mask & 7)) != 7 ]; then
    fail "$name" "the suite did not start with SIGHUP, SIGINT and SIGQUIT ignored (mask '$mask')"
  elif [ "$status" -eq 124 ]; then
    fail "$name" "still running after 150 s (its processes killed): $(tail -n 5 "$work/$name.log")"
  elif [ "$status" -ne 0 ]; then
    fail "$name" "exit status $status in $took s: $(grep -E 'FAIL|error' "$work/$name.log" | head -n 5)"
  elif ! grep -qE '(^|: )[1-9][0-9]* passed, 0 failed|^  ok ' "$work/$name.log"; then
    fail "$name" "no case passed: $(tail -n 3 "$work/$name.log")"
  else
    pass "$name: passed in $took s with those signals ignored ($(grep -c '^  ok ' "$work/$name.log") cases)"
  fi
done

suite_end
