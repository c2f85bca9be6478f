#!/usr/bin/env bash
# serve_hostile.sh: `facegen serve` (CPU backend, the tests' model, --io-timeout-s 2 --idle-timeout-s 3)
# against a hostile client (tests/lib/hostile_client.py): every member it can name of the classes of
# request an HTTP server must refuse or get right (framing, heads and their limits, keep-alive and
# pipelining, half-closed clients, JSON sent as a form, slow and idle clients), each answered as RFC
# 9112 asks and the server still serving after it; then curl -d with a 1 MiB body, as a user would
# send one; then SIGTERM to a second server with a connection of every kind held (idle, a head or a
# body not whole, a request being made, pipelined requests, a slow reader of a large answer). The
# servers start with default signal dispositions and are killed at the end even when a check fails;
# every wait has a deadline. Usage: serve_hostile.sh [build]
# runner: sanitized (make test-sanitize runs it again on the sanitized build)
# runner: alone (it holds answers to deadlines of about a second, and takes 20 s)
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh serve_hostile
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "serve_hostile: $prog or $model is missing (run make test)"; exit 1; }
py=/usr/bin/python3
command -v "$py" > /dev/null || py=python3
work=$(mktemp -d /tmp/facegen-serve-hostile.XXXXXX)
server=
cleanup() {
  [ -n "$server" ] && { kill -KILL "$server" 2> /dev/null; wait "$server" 2> /dev/null; }
  rm -rf "$work"
}
on_exit cleanup

echo "a hostile client:"
(exec env --default-signal "$prog" serve --device cpu --threads 1 --model "$model" --port 0 --io-timeout-s 2 --idle-timeout-s 3 \
   2> "$work/server.err") &
server=$!
port=$(serve_port "$work/server.err" "$server" 30)
if [ -z "$port" ]; then
  fail "the server starts" "$(head -c 300 "$work/server.err")"
  suite_end
  exit
fi
deadline 120 "$py" tests/lib/hostile_client.py "$port" "$server" > "$work/client.out" 2>&1
status=$?
tally < "$work/client.out"
[ $status = 0 ] || fail "the client" "ended with status $status"

# curl -d sends application/x-www-form-urlencoded: the body is read as JSON all the same.
{ printf '{"seeds": [1]'; head -c $((1 << 20)) /dev/zero | tr '\0' ' '; printf '}'; } > "$work/form.json"
code=$(curl -s --max-time 30 -o "$work/form.png" -w '%{http_code}' -d @"$work/form.json" "http://127.0.0.1:$port/v1/generate")
curl -s --max-time 30 -o "$work/one.png" "http://127.0.0.1:$port/v1/images/1.png"
if [ "$code" = 200 ] && cmp -s "$work/form.png" "$work/one.png"; then
  pass "curl -d with a 1 MiB JSON body: read as JSON"
else
  fail "curl -d with a 1 MiB JSON body" "status $code"
fi
kill -TERM "$server"
wait_pid "$server" 30
status=$?
server=
[ $status = 0 ] && pass "SIGTERM after it all: exit 0" || fail "SIGTERM after it all" "exit status $status: $(tail -c 300 "$work/server.err")"

# SIGTERM with a connection of every kind held (the client sends the signal and times the exit).
echo "stopping with connections of every kind:"
(exec env --default-signal "$prog" serve --device cpu --threads 1 --model "$model" --port 0 --io-timeout-s 2 --idle-timeout-s 30 \
   2> "$work/stop.err") &
server=$!
port=$(serve_port "$work/stop.err" "$server" 30)
if [ -n "$port" ]; then
  deadline 120 "$py" tests/lib/hostile_client.py "$port" "$server" stop > "$work/stop.out" 2>&1
  status=$?
  tally < "$work/stop.out"
  [ $status = 0 ] || fail "the stopping client" "ended with status $status"
  wait_pid "$server" 30
  status=$?
  server=
  [ $status = 0 ] && pass "SIGTERM with connections of every kind: exit 0" || fail "SIGTERM with connections of every kind" "exit status $status: $(tail -c 300 "$work/stop.err")"
else
  fail "the second server starts" "$(head -c 300 "$work/stop.err")"
fi
suite_end
