# serve_port.sh: the port a starting `facegen serve` says it listens on, for the tests and bench/serve.sh.
#
#   . tests/lib/serve_port.sh
#   port=$(serve_port ERR_FILE PID SECONDS)   # its stderr, its pid (the server or its launcher)
#
# Prints the port of the line "listening on http://127.0.0.1:PORT" once ERR_FILE holds it and returns
# 0; returns 1, printing nothing, when PID has ended first or SECONDS have passed.
serve_port() {
  local err=$1 pid=$2 port
  for _ in $(seq $(($3 * 10))); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$err" 2> /dev/null | grep -o '[0-9]*$')
    [ -n "$port" ] && { echo "$port"; return 0; }
    kill -0 "$pid" 2> /dev/null || return 1
    sleep 0.1
  done
  return 1
}
