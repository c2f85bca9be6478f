#!/usr/bin/env bash
# serve_page.sh: the page of `facegen serve` (GET /) in a real browser: Debian's headless Chromium.
#
#   it loads and shows the grid: every tile of #seeds=0-15 is loaded (the grid counts them)
#   the slider changes the face: at t=0 the face shown is seed A's PNG byte for byte, at t=100 seed
#     B's (the page marks the PNG it shows with its FNV-1a digest; the ends of the great circle are
#     the two latents exactly), and the two differ
#   no script errors, no failed request (the page counts them on <body data-problems>: headless
#     Chromium does not print the console here), and a bad seed is counted
#   a screenshot shows faces-like content: many saturated pixels, not a blank page
# The server starts with default signal dispositions on a free port and is killed at the end; every
# browser run has a deadline. Skipped where Chromium is not installed. Usage: serve_page.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh serve_page
. tests/lib/serve_port.sh
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "serve_page: $prog or $model is missing (run make test)"; exit 1; }
browser=$(command -v chromium || command -v chromium-browser) || skip_suite "no chromium (apt-get install chromium)"
py=/usr/bin/python3
$py -c "import PIL" 2> /dev/null || skip_suite "$py lacks PIL (python3-pil)"
work=$(mktemp -d /tmp/facegen-page.XXXXXX)
server=
cleanup() {
  [ -n "$server" ] && { kill -KILL "$server" 2> /dev/null; wait "$server" 2> /dev/null; }
  rm -rf "$work"
}
on_exit cleanup

(exec env --default-signal "$prog" serve --device cpu --model "$model" --port 0 2> "$work/server.err") &
server=$!
port=$(serve_port "$work/server.err" "$server" 30)
[ -n "$port" ] || { fail "the server starts" "$(head -c 300 "$work/server.err")"; suite_end; exit; }
url=http://127.0.0.1:$port/

# browse NAME ARGS...: Chromium on the page, 60 s at most; its console on $work/NAME.log.
browse() {
  local name=$1
  shift
  (cd "$work" && env --default-signal timeout 60 "$browser" --headless --no-sandbox --disable-gpu --no-first-run \
     --user-data-dir="$work/profile-$name" --enable-logging=stderr --v=0 --virtual-time-budget=15000 "$@") \
     2> "$work/$name.log"
}
digest_of() {  # the FNV-1a digest of a URL's bytes, as the page computes it
  $py -c 'import sys, urllib.request
h = 0x811c9dc5
for b in urllib.request.urlopen(sys.argv[1], timeout=30).read(): h = ((h ^ b) * 0x01000193) & 0xffffffff
print(format(h, "x"))' "$1"
}

echo "the page in a headless browser:"
browse start --dump-dom "$url#seeds=0-15&a=1&b=2&t=0" > "$work/start.html"
browse end --dump-dom "$url#seeds=0-15&a=1&b=2&t=100" > "$work/end.html"
loaded=$(grep -o 'id="grid" data-loaded="[0-9]*' "$work/start.html" | grep -o '[0-9]*$')
if [ "${loaded:-0}" = 16 ]; then pass "it loads and shows the grid: 16 of 16 faces"; else fail "the grid" "${loaded:-no} tiles loaded: $(grep -o '<div id="grid"[^>]*>' "$work/start.html") $(head -c 300 "$work/start.log")"; fi
start=$(grep -o 'data-digest="[0-9a-f]*"' "$work/start.html" | cut -d'"' -f2)
end=$(grep -o 'data-digest="[0-9a-f]*"' "$work/end.html" | cut -d'"' -f2)
want_a=$(digest_of "${url}v1/images/1.png")
want_b=$(digest_of "${url}v1/images/2.png")
if [ -n "$start" ] && [ "$start" = "$want_a" ] && [ "$end" = "$want_b" ] && [ "$start" != "$end" ]; then
  pass "the slider changes the face: seed 1's PNG at t=0, seed 2's at t=100"
else
  fail "the slider" "t=0 shows ${start:-nothing} (seed 1: $want_a), t=100 ${end:-nothing} (seed 2: $want_b)"
fi
# Headless Chromium does not print the page's console here; the page counts every script error,
# unhandled rejection, failed request and tile that did not load on <body data-problems>.
problems=$(grep -h -o 'data-problems="[0-9]*"' "$work/start.html" "$work/end.html")
shown=$(grep -h -o '<p id="error"[^>]*>[^<]*' "$work/start.html" "$work/end.html" | sed 's/.*>//' | tr -d '\n')
if [ -z "$problems$shown" ] && grep -q 'id="mix"' "$work/start.html"; then
  pass "no script errors, no failed request"
else
  fail "the page's errors" "$problems $shown"
fi
# The same count does see a failure: a seed that is not one.
browse bad --dump-dom "$url#seeds=0-1&a=x" > "$work/bad.html"
if grep -q 'data-problems="[1-9]' "$work/bad.html"; then pass "a failure on the page is counted (a bad seed)"; else fail "the page's error count" "a bad seed went unseen"; fi

browse shot --screenshot="$work/page.png" --window-size=900,1000 "$url#seeds=0-15"
verdict=$($py - "$work/page.png" <<'PY' 2>&1
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
saturated = sum(1 for r, g, b in img.getdata() if max(r, g, b) - min(r, g, b) > 40)
print("ok" if saturated > 16 * 64 * 64 // 4 else "blank", saturated)
PY
)
case $verdict in
  ok*) pass "a screenshot shows faces-like content (${verdict#ok } saturated pixels)" ;;
  *) fail "the screenshot" "$verdict" ;;
esac
suite_end
