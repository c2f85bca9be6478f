#!/usr/bin/env bash
# run_all.sh: every test this machine can run, one suite after another, then one verdict line.
#
# A suite that cannot run here (no GPU, no PyTorch) says so and why in its own output and counts as
# skipped, never as passed. The last line is "N passed, N failed, N skipped" (suites).
#
# SANITIZE=1 (make test-sanitize; BUILD=build-san): the AddressSanitizer + UndefinedBehaviorSanitizer
# build, where any report is fatal. It runs the light suites (unit, command line, faults, the HTTP
# server against a hostile client and the Open Inference Protocol's client) and skips, with the
# reason, those that would take long under the sanitizers or cannot use them.
#
# BACKGROUND_BUILD (make test sets it): a make command for what only the last suites need (the fuzz
# targets, build-vg/, the GPU tests, build-san/ for the next pass). It runs at the lowest priority
# while the other suites run; "background build" waits for it, with a deadline, and fails with its
# log's tail if it failed; then the GPU tests and the suites that use its outputs run.
set -u
cd "$(dirname "$0")/.."
build=${BUILD:-build}
sanitize=${SANITIZE:-0}
export SANITIZE=$sanitize
sanitized_suites=" faults foreign_journals serve_hostile serve_oip "
if [ "$sanitize" = 1 ]; then
  # exitcode 86: a sanitizer report must not look like the program's own exit status 1.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:exitcode=86:strict_string_checks=1:detect_stack_use_after_return=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}
  echo "sanitizer pass: $build, ASAN_OPTIONS=$ASAN_OPTIONS"
fi
background_pid=
background_log=$build/background-build.log
background_deadline_s=${BACKGROUND_DEADLINE_S:-2400}
if [ -n "${BACKGROUND_BUILD:-}" ] && [ "$sanitize" != 1 ]; then
  echo "building in the background while the first suites run (log: $background_log):"
  echo "  $BACKGROUND_BUILD"
  # shellcheck disable=SC2086  # a command line: make and its arguments, no spaces inside a word
  nice -n 19 $BACKGROUND_BUILD > "$background_log" 2>&1 < /dev/null &
  background_pid=$!
  # An interrupted run stops the build too (make passes SIGTERM on to its compilers).
  trap '[ -n "$background_pid" ] && kill "$background_pid" 2> /dev/null' EXIT
fi
# The suites that use what the background build makes.
background_suites=" fuzz_smoke valgrind "

# process_tree PID: PID and every process below it.
process_tree() {
  local child
  echo "$1"
  for child in $(pgrep -P "$1"); do process_tree "$child"; done
}

# background_done: waits for the background build, at most background_deadline_s from the start;
# 0 when it succeeded, else its log's tail and 1. The suites are done by then, so the build's
# processes go back to the usual priority first: at nice 19 they wait behind any other work on a
# shared machine (setting it back needs root, as CI has; elsewhere they stay where they are).
background_done() {
  # shellcheck disable=SC2046  # a list of pids
  renice 0 -p $(process_tree "$background_pid") > /dev/null 2>&1
  while kill -0 "$background_pid" 2> /dev/null && [ $SECONDS -lt "$background_deadline_s" ]; do sleep 1; done
  if kill -0 "$background_pid" 2> /dev/null; then
    echo "the background build was still running ${background_deadline_s} s after the start; stopped"
    kill "$background_pid"
    for _ in $(seq 100); do kill -0 "$background_pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$background_pid" 2> /dev/null
    background_pid=
    return 1
  fi
  wait "$background_pid"
  local status=$?
  background_pid=
  [ $status -eq 0 ] && return 0
  echo "the background build failed (exit status $status); the end of $background_log:"
  tail -n 30 "$background_log"
  return 1
}

# failed_recap: for each failed suite, its FAIL lines (or, without any, its last lines), then the names.
failed_recap() {
  [ $failed -gt 0 ] || return 0
  local name log
  for name in "${failed_names[@]}"; do
    log=$(suite_log "$name")
    echo "--- $name:"
    if grep -q '^ *FAIL' "$log"; then grep '^ *FAIL' "$log" | head -n 20; else tail -n 15 "$log"; fi
  done
  echo "failed suites: ${failed_names[*]}"
}

passed=0
failed=0
skipped=0
failed_names=()

# Each suite's output also goes to a log of its own, so the verdict can repeat a failed suite's FAIL
# lines at the end, where a reader of a long CI log looks first.
log_dir=$build/test-logs
rm -rf "$log_dir" && mkdir -p "$log_dir"
suite_log() { echo "$log_dir/$(echo "$1" | tr -c 'A-Za-z0-9_\n' '_').log"; }

# suite NAME COMMAND...: runs it; exit 0 passes, exit 77 is "skipped", anything else fails.
suite() {
  local name=$1
  shift
  echo
  echo "=== $name"
  local start=$SECONDS log
  log=$(suite_log "$name")
  # tee in a process substitution: a process the suite left behind holding its output keeps tee
  # alive, never this script (tee is waited for 5 s at most, so the lines keep their order).
  local out tee_pid
  exec {out}> >(tee "$log")
  tee_pid=$!
  "$@" >&$out 2>&1
  local status=$?
  exec {out}>&-
  for _ in $(seq 50); do kill -0 "$tee_pid" 2> /dev/null || break; sleep 0.1; done
  if [ $status -eq 0 ]; then
    passed=$((passed + 1)); echo "=== $name: passed ($((SECONDS - start)) s)"
  elif [ $status -eq 77 ]; then
    skipped=$((skipped + 1)); echo "=== $name: skipped"
  else
    failed=$((failed + 1)); failed_names+=("$name"); echo "=== $name: FAILED (exit status $status)"
  fi
}

suite "unit tests (doctest)" "$build/facegen-tests"
suite "command line" tests/test_cli.sh "$build"
if [ "$sanitize" = 1 ]; then
  echo; echo "=== cross-check against PyTorch, model files against PyTorch, GPU tests: skipped (plain pass only: PyTorch and CUDA need no sanitized build)"
  skipped=$((skipped + 3))
  for extra in tests/suites/*.sh; do
    name=$(basename "$extra" .sh)
    case $sanitized_suites in
      *" $name "*) suite "$name (sanitized)" bash "$extra" "$build" ;;
      *) echo; echo "=== $name: skipped (plain pass only: slow under the sanitizers, or a sanitizer or valgrind of its own)"; skipped=$((skipped + 1)) ;;
    esac
  done
  echo
  failed_recap
  echo "$passed passed, $failed failed, $skipped skipped"
  [ $failed -eq 0 ]
  exit
fi
if [ -f tests/torch_crosscheck.py ]; then
  suite "cross-check against PyTorch" /usr/bin/python3 tests/torch_crosscheck.py .
fi
suite "model files against PyTorch" /usr/bin/python3 tests/model_files.py .
for extra in tests/suites/*.sh; do
  case $background_suites in *" $(basename "$extra" .sh) "*) continue ;; esac
  [ -f "$extra" ] && suite "$(basename "$extra" .sh)" bash "$extra" "$build"
done
[ -n "$background_pid" ] && suite "background build" background_done
if [ -x "$build/facegen-gpu-tests" ]; then
  suite "GPU tests" "$build/facegen-gpu-tests"
else
  echo; echo "=== GPU tests: skipped (built without CUDA)"; skipped=$((skipped + 1))
fi
for name in $background_suites; do
  [ -f "tests/suites/$name.sh" ] && suite "$name" bash "tests/suites/$name.sh" "$build"
done

echo
failed_recap
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
