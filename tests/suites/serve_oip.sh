#!/usr/bin/env bash
# serve_oip.sh: `facegen serve` speaks the Open Inference Protocol (KServe v2, Triton's HTTP/REST API)
# to a client written from the protocol's documents (tests/lib/oip_client.py, Python's standard
# library alone): health, metadata, inference of seeds and latents as JSON and as binary tensors with
# the batch tool's exact npy-u8 pixels, every kind of bad tensor refused with 400; then curl, as a
# user would call it; then, with --token-file, inference needs the token while the probes stay open;
# then two models served by name (faces: the tests' model, fashion: the shipped grey Fashion-MNIST one)
# as Triton's clients see them: the repository index, configurations, statistics, inference by name,
# the images' caching by model (tests/lib/oip_client.py, mode models); and an image's ETag across a
# restart with another --model.
# CPU backend (SERVE_DEVICE=cuda: a GPU) and the tests' model; servers start with default signal
# dispositions and are killed at the end even when a check fails. Usage: serve_oip.sh [build]
# runner: sanitized (make test-sanitize runs it again on the sanitized build)
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh serve_oip
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "serve_oip: $prog or $model is missing (run make test)"; exit 1; }
device=${SERVE_DEVICE:-cpu}
export SERVE_DEVICE=$device
py=/usr/bin/python3
command -v "$py" > /dev/null || py=python3
work=$(mktemp -d /tmp/facegen-serve-oip.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill -KILL "$pid" 2> /dev/null && wait "$pid" 2> /dev/null; done
  rm -rf "$work"
}
on_exit cleanup

# start_server NAME ARGS...: the server in the background ($server, $port); false when it has not
# said where it listens within 30 s.
start_server() {
  local name=$1
  shift
  (exec env --default-signal "$prog" serve --device "$device" --model "$model" --port 0 "$@" 2> "$work/$name.err") &
  server=$!
  servers+=("$server")
  port=$(serve_port "$work/$name.err" "$server" 30)
}

echo "the Open Inference Protocol:"
if ! start_server main; then
  fail "the server starts" "$(head -c 300 "$work/main.err")"
  suite_end
  exit
fi
deadline 180 "$py" tests/lib/oip_client.py "$port" "$work" "$model" "$prog" > "$work/client.out" 2>&1
status=$?
tally < "$work/client.out"
[ $status = 0 ] || fail "the client" "ended with status $status"

# curl: seeds in, images out as binary after the JSON; the pixels are the batch tool's.
json='{"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [2], "data": [8, 9]}], "parameters": {"binary_data_output": true}}'
curl -s --max-time 60 -D "$work/curl.head" -o "$work/curl.body" -H 'Content-Type: application/json' -d "$json" \
  "http://127.0.0.1:$port/v2/models/facegen/infer"
length=$(grep -i '^Inference-Header-Content-Length:' "$work/curl.head" | tr -dc '0-9')
"$prog" --device "$device" --model "$model" --seeds 8,9 --formats npy-u8 --quiet --output "$work/curl-batch"
if [ -n "$length" ] && cmp -s <(tail -c +$((length + 1)) "$work/curl.body") <(tail -c $((2 * 64 * 64 * 3)) "$work/curl-batch.u8.npy"); then
  pass "curl: seeds 8 and 9, the images as binary after ${length} bytes of JSON: the batch tool's pixels"
else
  fail "curl" "header length '${length}': $(head -c 300 "$work/curl.body")"
fi
kill -TERM "$server"
wait_pid "$server" 30 > /dev/null

# With a token: inference and metadata need it, the probes do not.
printf 'open-sesame\n' > "$work/token"
if start_server token --token-file "$work/token"; then
  code() { curl -s -o /dev/null -w '%{http_code}' --max-time 30 "$@"; }
  none=$(code -d "$json" "http://127.0.0.1:$port/v2/models/facegen/infer")
  with=$(code -H 'Authorization: Bearer open-sesame' -d "$json" "http://127.0.0.1:$port/v2/models/facegen/infer")
  meta=$(code "http://127.0.0.1:$port/v2/models/facegen")
  probes="$(code "http://127.0.0.1:$port/v2/health/live") $(code "http://127.0.0.1:$port/v2/health/ready") $(code "http://127.0.0.1:$port/v2/models/facegen/ready")"
  if [ "$none $with $meta $probes" = "401 200 401 200 200 200" ]; then
    pass "--token-file: inference and metadata need the token, the probes stay open"
  else
    fail "--token-file" "infer without $none, with $with, metadata $meta, probes $probes"
  fi
  kill -TERM "$server"
  wait_pid "$server" 30 > /dev/null
else
  fail "a server with --token-file starts" "$(head -c 300 "$work/token.err")"
fi

# Two models by name, as Triton serves a repository.
model2=models/facegen-fashion.bin
(exec env --default-signal "$prog" serve --device "$device" --model "faces=$model" --model "fashion=$model2" --port 0 \
  2> "$work/two.err") &
server=$!
servers+=("$server")
if port=$(serve_port "$work/two.err" "$server" 30); then
  if grep -q "listening on http://127.0.0.1:$port/ with .* per model, models faces (random-network.bin), fashion (facegen-fashion.bin)$" "$work/two.err"; then
    pass "two models: the listening line names both and their files"
  else
    fail "two models' listening line" "$(cat "$work/two.err")"
  fi
  deadline 180 "$py" tests/lib/oip_client.py "$port" "$work" "$model" "$prog" models "$model2" > "$work/models.out" 2>&1
  status=$?
  tally < "$work/models.out"
  [ $status = 0 ] || fail "the client of two models" "ended with status $status"
  kill -TERM "$server"
  wait_pid "$server" 30 > /dev/null
else
  fail "a server of two models starts" "$(head -c 300 "$work/two.err")"
fi
# /v1/images/SEED.png names no model: its ETag changes with the model, so a cache that asks with the
# old one gets the new image after a restart with another --model.
etag_of() { grep -i '^etag:' "$1" | tr -d '\r' | cut -d' ' -f2; }
tags=()
for m in "$model" "$model2"; do
  (exec env --default-signal "$prog" serve --device "$device" --model "$m" --port 0 -q 2> "$work/restart.err") &
  server=$!
  servers+=("$server")
  if port=$(serve_port "$work/restart.err" "$server" 30); then
    curl -s --max-time 30 -D "$work/first.head" -o "$work/first.png" "http://127.0.0.1:$port/v1/images/5.png"
    tags+=("$(etag_of "$work/first.head")")
    code=$(curl -s --max-time 30 -o "$work/again.png" -w '%{http_code}' -H "If-None-Match: ${tags[0]}" "http://127.0.0.1:$port/v1/images/5.png")
    tags+=("$code")
    kill -TERM "$server"
    wait_pid "$server" 30 > /dev/null
  fi
done
if [ ${#tags[@]} = 4 ] && [ "${tags[1]}" = 304 ] && [ "${tags[3]}" = 200 ] && [ "${tags[0]}" != "${tags[2]}" ] &&
   [ -s "$work/again.png" ]; then
  pass "/v1/images/5.png across a restart with another --model: ETag ${tags[0]} then ${tags[2]}; the old one gets 304, then the new image"
else
  fail "ETag across a restart" "tags and answers: ${tags[*]}"
fi
suite_end
