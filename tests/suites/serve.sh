#!/usr/bin/env bash
# serve.sh: `facegen serve` on 127.0.0.1 with the CPU backend (SERVE_DEVICE=cuda: a GPU) and the tests'
# model, as a client sees it.
#
#   endpoints    /healthz, /readyz, the page, /v1/latents, /metrics
#   identity     every format of POST /v1/generate (png, tar, npy, npy-u8, mosaic) and /v1/images/SEED.png
#                hold the batch tool's bytes for the same seeds, and for the same latents (read by it
#                from a .npy)
#   bad input    malformed JSON, both or neither of seeds and latents, a wrong latent length, a value
#                too large for a float, too many images, an unknown format, a bad seed in the path, an
#                unknown route, a wrong method, a body too large: each its status and one sentence in
#                {"error": ...}, then a good request still served
#   concurrency  32 requests at once, each answered with its own image; /metrics counts every one; the
#                latency of 200 one-image requests in turn (printed, not judged)
#   bad clients  (--io-timeout-s 2) one that sends half a request and stalls: /healthz and an image
#                answer within 1 s meanwhile, and the server answers it 400 after 2 s and closes it
#                by 4 s; 160 that send a request and vanish: all made, over the last 96 the server's
#                memory grows less than 8 MiB and its open files not at all, and it answers at once
#                after; 300 silent connections opened at once: /healthz and an image answer within 1 s
#   stopping     SIGTERM with requests in flight: each is answered, then exit 0 within seconds;
#                SIGINT when idle: exit 0; a port already taken: exit 1 and one sentence
#   token        with --token-file, /v1/ and /metrics need "Authorization: Bearer TOKEN" (401 otherwise)
# Every server starts with default signal dispositions and a free port of its own choosing (--port 0,
# read from its first line), every wait has a deadline, and every server is killed at the end even
# when a check fails. Usage: serve.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh serve
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] || { echo "serve: $prog is missing (run make)"; exit 1; }
[ -f "$model" ] || { echo "serve: $model is missing (run make test)"; exit 1; }
device=${SERVE_DEVICE:-cpu}  # SERVE_DEVICE=cuda on a GPU machine: the same checks on the GPU path
export SERVE_DEVICE=$device
py=/usr/bin/python3  # Debian's, with numpy; elsewhere (the GPU machine) the python3 on PATH may have it
$py -c "import numpy" 2> /dev/null || py=python3
$py -c "import numpy" 2> /dev/null || skip_suite "$py lacks numpy"
work=$(mktemp -d /tmp/facegen-serve.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill -KILL "$pid" 2> /dev/null && wait "$pid" 2> /dev/null; done
  rm -rf "$work"
}
on_exit cleanup

# start_server NAME ARGS...: the server in the background (its pid in $server, its port in $port);
# false when it has not said where it listens within 30 s.
start_server() {
  local name=$1
  shift
  (exec env --default-signal "$prog" serve --device "$device" --model "$model" --port 0 "$@" 2> "$work/$name.err") &
  server=$!
  servers+=("$server")
  port=$(serve_port "$work/$name.err" "$server" 30)
}

# wait_exit PID SECONDS: the exit status of PID (a child), or 124 when it is still running at the deadline.
wait_exit() {
  local pid=$1
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$pid" 2> /dev/null || { wait "$pid"; return $?; }
    sleep 0.1
  done
  return 124
}

echo "the service as a client sees it:"
if start_server main --max-delay-ms 5 --io-timeout-s 2; then
  pass "starts and says where it listens (port $port)"
  timeout 600 $py tests/lib/serve_client.py "$port" "$work" "$model" "$prog" checks > "$work/client.out" 2>&1
  status=$?
  tally < "$work/client.out"
  [ $status = 0 ] || fail "the client" "ended with status $status"
  timeout 120 $py tests/lib/serve_client.py "$port" "$work" "$model" "$prog" latency 200 > "$work/latency.out" 2>&1
  status=$?
  tally < "$work/latency.out"  # from a file: tally in a pipe's subshell would count nothing
  [ $status = 0 ] || fail "one image at a time" "the client ended with status $status"
  timeout 120 $py tests/lib/serve_client.py "$port" "$work" "$model" "$prog" clients "$server" 2 > "$work/clients.out" 2>&1
  status=$?
  tally < "$work/clients.out"
  [ $status = 0 ] || fail "the misbehaving clients" "ended with status $status"
  # A second server on the same port: the system's own words for why.
  (exec env --default-signal timeout 30 "$prog" serve --device cpu --model "$model" --port "$port" 2> "$work/taken.err")
  status=$?
  if [ $status = 1 ] && [ "$(wc -l < "$work/taken.err")" = 1 ] &&
     grep -qx "facegen serve: error: cannot listen on 127.0.0.1:$port: bind: Address already in use" "$work/taken.err"; then
    pass "a port already taken: exit 1 and one sentence with the system's reason: $(cat "$work/taken.err")"
  else
    fail "a port already taken" "status $status: $(head -c 300 "$work/taken.err")"
  fi
  # SIGTERM with 12 requests of 16 images in flight: each answered, then a clean exit.
  timeout 300 $py tests/lib/serve_client.py "$port" "$work" "$model" "$prog" load 12 > "$work/load.out" 2>&1 &
  client=$!
  for _ in $(seq 100); do grep -q STARTED "$work/load.out" && break; sleep 0.1; done
  kill -TERM "$server"
  wait_exit "$server" 60
  status=$?
  wait "$client"
  answered=$(grep -c '^RESULT 200 196736$' "$work/load.out")
  if [ $status = 0 ] && [ "$answered" = 12 ] && grep -q 'stopped' "$work/main.err"; then
    pass "SIGTERM with 12 requests in flight: all 12 answered, then exit 0"
  else
    fail "SIGTERM under load" "exit status $status, $answered of 12 answered: $(tail -c 300 "$work/load.out") $(tail -c 300 "$work/main.err")"
  fi
else
  fail "the server starts" "$(head -c 300 "$work/main.err")"
fi

# --png-level: PNG answers compressed as the batch tool's with the same level; then SIGINT when idle.
if start_server idle --png-level 6; then
  png_bytes() { curl -s --max-time 30 -o "$work/$2" -w '%{http_code}' "http://127.0.0.1:$port/v1/images/$1.png"; }
  status=$(png_bytes 3 level6.png)
  timeout 60 "$prog" --device "$device" --model "$model" --seeds 3 --formats png --png-level 6 --output "$work/level6" -q
  timeout 60 "$prog" --device "$device" --model "$model" --seeds 3 --formats png --output "$work/level0" -q
  if [ "$status" = 200 ] && cmp -s "$work/level6.png" "$work/level6/seed0003.png" &&
     [ "$(stat -c %s "$work/level6.png")" -lt "$(stat -c %s "$work/level0/seed0003.png")" ]; then
    pass "--png-level 6: an image's PNG is the batch tool's at that level, smaller than level 0's"
  else
    fail "--png-level 6" "status $status, $(stat -c %s "$work/level6.png" 2> /dev/null) bytes against the batch tool's"
  fi
  start=$SECONDS
  kill -INT "$server"
  wait_exit "$server" 10
  status=$?
  if [ $status = 0 ] && [ $((SECONDS - start)) -le 5 ]; then
    pass "SIGINT when idle: exit 0 within $((SECONDS - start)) s"
  else
    fail "SIGINT when idle" "exit status $status after $((SECONDS - start)) s: $(tail -c 300 "$work/idle.err")"
  fi
else
  fail "the second server starts" "$(head -c 300 "$work/idle.err")"
fi

# --token-file: /v1/ and /metrics need the token, /healthz does not; an empty token file is refused.
printf 'sesame-42\n' > "$work/token"
if start_server token --token-file "$work/token"; then
  code() { curl -s -o "$work/answer" -w '%{http_code}' --max-time 30 "$@"; }
  none=$(code "http://127.0.0.1:$port/v1/images/1.png")
  wrong=$(code -H 'Authorization: Bearer sesame-41' "http://127.0.0.1:$port/metrics")
  right=$(code -H 'Authorization: Bearer sesame-42' "http://127.0.0.1:$port/v1/images/1.png")
  health=$(code "http://127.0.0.1:$port/healthz")
  if [ "$none $wrong $right $health" = "401 401 200 200" ]; then
    pass "--token-file: 401 without the token or with another, 200 with it; /healthz open"
  else
    fail "--token-file" "no token $none, another $wrong, the token $right, /healthz $health"
  fi
  kill -TERM "$server"
  wait_exit "$server" 30 > /dev/null
else
  fail "a server with --token-file starts" "$(head -c 300 "$work/token.err")"
fi
: > "$work/empty-token"
out=$(env --default-signal timeout 30 "$prog" serve --token-file "$work/empty-token" 2>&1)
status=$?
if [ $status = 1 ] && echo "$out" | grep -q "must hold one token"; then
  pass "an empty --token-file: exit 1 and one sentence"
else
  fail "an empty --token-file" "status $status: $out"
fi

# Flags: a bad value is one sentence and exit 1; --help lists the flags.
# refused FLAG VALUE SENTENCE: `facegen serve FLAG VALUE` exits 1 with one line holding SENTENCE.
refused() {
  local out status
  out=$(env --default-signal timeout 30 "$prog" serve "$1" "$2" 2>&1)
  status=$?
  if [ $status = 1 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q -- "$3"; then
    pass "$1 $2: exit 1 and one sentence"
  else
    fail "$1 $2" "status $status: $out"
  fi
}
refused --max-batch 0 "--max-batch expects a whole number"
refused --device gpu "unknown --device 'gpu' (expected auto, cuda, cpu or synthetic; cuda is the NVIDIA GPU)"
# A flag given twice (but --model, once per model), the models' names: one sentence each.
refused_line() {  # refused_line NAME STATUS PATTERN ARGS...: `facegen serve ARGS` exits STATUS with one line matching PATTERN
  local name=$1 want=$2 pattern=$3 out status
  shift 3
  out=$(env --default-signal timeout 30 "$prog" serve "$@" 2>&1)
  status=$?
  if [ $status = "$want" ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -qE -- "$pattern"; then
    pass "$name: exit $want, $out"
  else
    fail "$name" "status $status: $out"
  fi
}
refused_line "--port given twice" 1 "^facegen serve: error: --port is given twice \('0', then '0'\); give it once$" --port 0 --port 0
refused_line "-q given twice" 1 "^facegen serve: error: --quiet is given twice; give it once$" -q --quiet
refused_line "an unknown flag" 2 "^facegen serve: unknown flag --bogus \(see facegen serve --help\)$" --bogus
refused_line "two models without names" 1 "^facegen serve: error: --model $model has no name, and several models are served: give each as --model NAME=PATH$" \
  --model "$model" --model "b=$model"
refused_line "one name for two models" 1 "^facegen serve: error: --model names a twice; give each model a name of its own$" \
  --model "a=$model" --model "a=$model"
refused_line "a model named stats" 1 "^facegen serve: error: --model stats=.*: the name 'stats' must be" --model "stats=$model"
refused_line "a name with a space" 1 "^facegen serve: error: --model my model=.*: the name 'my model' must be" --model "my model=$model"
refused_line "--model with --device synthetic" 1 "^facegen serve: error: --model names the generator, and --device synthetic draws test images without one$" \
  --device synthetic --model "$model"
# --device synthetic: one model, named facegen, with no file; its images are the batch tool's synthetic ones.
(exec env --default-signal "$prog" serve --device synthetic --batch-workers 2 --port 0 2> "$work/synthetic.err") &
server=$!
servers+=("$server")
if port=$(serve_port "$work/synthetic.err" "$server" 30); then
  models=$(curl -s --max-time 30 "http://127.0.0.1:$port/v1/models")
  status=$(curl -s --max-time 30 -o "$work/synthetic.png" -w '%{http_code}' "http://127.0.0.1:$port/v1/models/facegen/images/3.png")
  timeout 60 "$prog" --device synthetic --seeds 3 --formats png --output "$work/synthetic" -q
  if [ "$status" = 200 ] && cmp -s "$work/synthetic.png" "$work/synthetic/seed0003.png" &&
     echo "$models" | grep -q '"name": "facegen", "file": null, "xxh3": null, .*"device": "synthetic"'; then
    pass "--device synthetic: model facegen with no file, and an image the batch tool's synthetic one"
  else
    fail "--device synthetic" "status $status, models $models: $(head -c 300 "$work/synthetic.err")"
  fi
  kill -TERM "$server"
  wait_exit "$server" 30 > /dev/null
else
  fail "a server with --device synthetic starts" "$(head -c 300 "$work/synthetic.err")"
fi
# --quiet: nothing but the line that says where it listens, which --port 0 needs.
(exec env --default-signal "$prog" serve --device "$device" --model "$model" --port 0 --quiet 2> "$work/quiet.err") &
server=$!
servers+=("$server")
if port=$(serve_port "$work/quiet.err" "$server" 30) && [ "$(wc -l < "$work/quiet.err")" = 1 ]; then
  pass "--port 0 --quiet: one line on stderr, where it listens (port $port)"
else
  fail "--port 0 --quiet" "$(cat "$work/quiet.err")"
fi
kill -TERM "$server"
wait_exit "$server" 30 > /dev/null
refused --io-timeout-s 0 "--io-timeout-s expects a whole number from 1 to 3600, got '0'"
refused --png-level 13 "--png-level expects a whole number from 0 to 12, got '13'"
if "$prog" serve --help | grep -q -- '--max-delay-ms'; then pass "facegen serve --help lists its flags"; else fail "serve --help" "no --max-delay-ms"; fi

suite_end
