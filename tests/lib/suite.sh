# suite.sh: what every test suite prints and how it ends, sourced by tests/test_cli.sh and tests/suites/*.sh.
#
#   . tests/lib/suite.sh NAME       NAME begins the summary line ("NAME: 3 passed, 0 failed") unless
#                                   suite_end --bare leaves it out
#
# One line per case ("  ok    NAME", "  FAIL  NAME: WHY", "  skip  NAME"), then suite_end prints the
# summary and gives the exit status tests/run_all.sh reads: 0 all passed, 1 a case failed; skip_suite
# ends a suite that cannot run here with 77 and one line saying why.
suite_name=$1
passed=0
failed=0
skipped=0
pass() { echo "  ok    $1"; passed=$((passed + 1)); }
fail() { echo "  FAIL  $1: $2"; failed=$((failed + 1)); }
skip() { echo "  skip  $1"; skipped=$((skipped + 1)); }

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
  echo "$prefix$counts"
  [ "$failed" -eq 0 ]
}
