#!/usr/bin/env bash
# run_all.sh: every test this machine can run, side by side, then one verdict line.
#
# Each test program or suite is a job; the builds that only some jobs need (the sanitized build,
# build-vg/, the fuzz targets, the GPU tests) are jobs too, and the jobs that need one wait for it.
# Jobs run at once as far as the CPUs go (admit, below): the job on the longest path to the end (its
# own time and the jobs that wait for it, from the last whole run here, $BUILD/test-times.tsv, or
# tests/suite_times.tsv) starts first, and another while CPUs are idle and the running jobs' CPU use
# per second adds up to less than TEST_CPUS. The builds run niced, one at a time, in the time the
# tests leave. Every suite has scratch folders, ports and names of its own, so none sees another's.
# A suite whose header says "# runner: alone" runs with nothing beside it, after the others; one
# that says "# runner: inside OTHER" is run by suite OTHER, not on its own (but where TEST_ONLY names it).
#
# A job's output goes whole to its log ($BUILD/test-logs/NAME.log, $SAN_BUILD/test-logs/ for the
# sanitized pass), and is printed once the job ends, with its wall and CPU time. A job that cannot
# run here (no GPU, no PyTorch) says why and counts as skipped, never as passed. At the end: the
# times, longest first; each failed job's FAIL lines; and last "N passed, N failed, N skipped".
#
#   PASSES     "plain", "sanitized" or "plain sanitized" (default plain; sanitized with SANITIZE=1)
#   BUILD      the plain pass's build (default build); with SANITIZE=1, the sanitized one
#   SAN_BUILD  the sanitized pass's build (default build-san): AddressSanitizer + UndefinedBehavior-
#              Sanitizer, any report fatal; the unit tests, the command line and the suites whose
#              header says "# runner: sanitized" run there, the rest say they are plain pass only
#   TEST_BUILD_SANITIZED, TEST_BUILD_VALGRIND, TEST_BUILD_FUZZ, TEST_BUILD_GPU: the make command of
#              each such build (make test sets them); a suite whose header says
#              "# runner: needs valgrind" (fuzz, gpu, sanitized) waits for that build
#   TEST_ONLY  only these jobs: suite names, unit, cli, crosscheck, model_files, gpu (make test-quick)
#   TEST_CPUS  the CPUs the jobs' shares may add up to (default 1.5 x nproc); TEST_JOBS at most this
#              many jobs at once (default 4 x TEST_CPUS; 1 runs them one after another)
#   TEST_JOB_DEADLINE_S  a test job still running after this long is stopped and fails (default 1200)
#   TEST_BUILD_DEADLINE_S  the same for a build job (default 3600: niced, beside the tests on 2 CPUs,
#              the sanitized build took 1,192 s in one run and was stopped at 1,200 s in the next)
set -u
cd "$(dirname "$0")/.."
repo=$PWD

if [ "${SANITIZE:-0}" = 1 ]; then
  passes=${PASSES:-sanitized}
  san_build=${SAN_BUILD:-${BUILD:-build-san}}
  plain_build=${BUILD:-build}
  [ "$passes" = sanitized ] || plain_build=build
else
  passes=${PASSES:-plain}
  plain_build=${BUILD:-build}
  san_build=${SAN_BUILD:-build-san}
fi
cpus=$(nproc)
# Half as much again as there are CPUs: a job's share is its average, and most jobs spend part of
# their run waiting (for ranks, daemons, timeouts), so that the CPUs stay busy through their waits.
capacity=${TEST_CPUS:-$((cpus + cpus / 2))}
max_jobs=${TEST_JOBS:-$((4 * capacity))}
job_deadline_s=${TEST_JOB_DEADLINE_S:-1200}
build_deadline_s=${TEST_BUILD_DEADLINE_S:-3600}
only=" ${TEST_ONLY:-} "
first_build=$plain_build
case " $passes " in *" plain "*) ;; *) first_build=$san_build ;; esac
state=$(mktemp -d /tmp/facegen-run-all.XXXXXX)

# --- the jobs ---------------------------------------------------------------------------------------
# Parallel arrays by job number: id (TEST_ONLY's name), name (the log's and the verdict's), pass
# (plain, sanitized, build), the build it waits for, alone (0/1), the command (a shell string).
j_id=() j_name=() j_pass=() j_needs=() j_alone=() j_cmd=() j_log=()
j_state=() j_pid=() j_start=() j_wall=() j_cpu=() j_status=()
# The sanitizers' options: a report must not look like the program's own exit status 1 (86).
asan_options=${ASAN_OPTIONS:-detect_leaks=1:exitcode=86:strict_string_checks=1:detect_stack_use_after_return=1}
ubsan_options=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}

log_name() { echo "$1" | tr -c 'A-Za-z0-9_\n' '_'; }

# add_job ID NAME PASS NEEDS ALONE COMMAND: one job, unless TEST_ONLY leaves it out.
add_job() {
  local id=$1 name=$2 pass=$3 needs=$4 alone=$5 cmd=$6 dir
  if [ "$pass" != build ] && [ "$only" != "  " ]; then
    case $only in *" $id "*) ;; *) return 0 ;; esac
  fi
  case $pass in sanitized) dir=$san_build ;; build) dir=$first_build ;; *) dir=$plain_build ;; esac
  local i=${#j_id[@]}
  j_id[i]=$id; j_name[i]=$name; j_pass[i]=$pass; j_needs[i]=$needs; j_alone[i]=$alone; j_cmd[i]=$cmd
  j_log[i]=$dir/test-logs/$(log_name "$name").log
  j_state[i]=waiting; j_status[i]=
}

# suite_flags SCRIPT: the words of its "# runner:" header lines (alone, sanitized, needs BUILD, inside
# SUITE), each line's words up to a parenthesis (which explains them).
suite_flags() { sed -n 's/^# runner: *//p' "$1" | sed 's/(.*//' | tr '\n' ' '; }

passed=0 failed=0 skipped=0
failed_names=()
skip_line() {  # skip_line NAME WHY: a job that does not run, counted as skipped
  echo; echo "=== $1: skipped ($2)"; skipped=$((skipped + 1))
}

add_builds() {
  local kind var level
  for kind in sanitized valgrind fuzz gpu; do
    var=TEST_BUILD_${kind^^}
    [ -n "${!var:-}" ] || continue
    [ "$kind" = sanitized ] && { case " $passes " in *" sanitized "*) ;; *) continue ;; esac; }
    # Niced: the tests come first, and a build takes the CPU time they leave. The sanitized build
    # less so: the sanitized pass waits for it.
    level=10
    [ "$kind" = sanitized ] && level=3
    add_job "build-$kind" "build: $kind" build "" 0 "nice -n $level ${!var}"
  done
}

# add_pass PASS DIR: the jobs of one pass.
add_pass() {
  local pass=$1 dir=$2 q suffix= needs= script name flags
  q=$(printf '%q' "$dir")
  [ "$pass" = sanitized ] && { suffix=" (sanitized)"; needs=build-sanitized; }
  add_job unit "unit tests (doctest)$suffix" "$pass" "$needs" 0 "$q/facegen-tests"
  add_job cli "command line$suffix" "$pass" "$needs" 0 "tests/test_cli.sh $q"
  if [ "$pass" = plain ]; then
    [ -f tests/torch_crosscheck.py ] &&
      add_job crosscheck "cross-check against PyTorch" plain "" 0 "/usr/bin/python3 tests/torch_crosscheck.py ."
    add_job model_files "model files against PyTorch" plain "" 0 "/usr/bin/python3 tests/model_files.py ."
    add_job gpu "GPU tests" plain build-gpu 0 \
      "if [ -x $q/facegen-gpu-tests ]; then $q/facegen-gpu-tests; else echo 'skip: built without CUDA'; exit 77; fi"
  elif [ "$only" = "  " ]; then
    skip_line "cross-check against PyTorch, model files against PyTorch, GPU tests$suffix" \
      "plain pass only: PyTorch and CUDA need no sanitized build"
    skipped=$((skipped + 2))
  fi
  for script in tests/suites/*.sh; do
    name=$(basename "$script" .sh)
    flags=" $(suite_flags "$script") "
    if [ "$pass" = sanitized ]; then
      case $flags in
        *" sanitized "*) ;;
        *) case $only in "  "|*" $name "*)
             skip_line "$name$suffix" "plain pass only: slow under the sanitizers, or a sanitizer or valgrind of its own" ;;
           esac
           continue ;;
      esac
    fi
    # A suite that another runs ("inside NAME") is left to it, unless TEST_ONLY names it.
    case $flags in *" inside "*) [ "$pass" = plain ] && [[ $only != *" $name "* ]] && continue ;; esac
    local alone=0 own_needs=$needs
    case $flags in *" alone "*) alone=1 ;; esac
    [[ $flags =~ needs\ ([a-z]+) ]] && own_needs="$own_needs build-${BASH_REMATCH[1]}"
    add_job "$name" "$name$suffix" "$pass" "$own_needs" "$alone" "bash $script $q"
  done
}

case " $passes " in *" plain "*|*" sanitized "*) ;; *) echo "run_all: PASSES='$passes': expected plain, sanitized or both"; exit 2 ;; esac
case " $passes " in *" sanitized "*) echo "sanitizer pass: $san_build, ASAN_OPTIONS=$asan_options" ;; esac
add_builds
case " $passes " in *" plain "*) add_pass plain "$plain_build" ;; esac
case " $passes " in *" sanitized "*) add_pass sanitized "$san_build" ;; esac
for dir in $plain_build $san_build; do
  case " $passes " in *" plain "*) ;; *) [ "$dir" = "$plain_build" ] && continue ;; esac
  case " $passes " in *" sanitized "*) ;; *) [ "$dir" = "$san_build" ] && continue ;; esac
  rm -rf "$dir/test-logs" && mkdir -p "$dir/test-logs"
done
mkdir -p "$first_build/test-logs"

# --- what each job costs: wall seconds and CPU seconds, the last run's over the table's -------------
declare -A cost_wall=() cost_cpu=()
for table in tests/suite_times.tsv "$first_build/test-times.tsv"; do
  [ -f "$table" ] || continue
  while IFS=$'\t' read -r name wall cpu _; do
    [[ $wall =~ ^[0-9]+$ ]] && [[ $cpu =~ ^[0-9]+$ ]] || continue
    cost_wall[$name]=$wall; cost_cpu[$name]=$cpu
  done < "$table"
done
# share[i]: CPUs in hundredths the job keeps busy; rank[i]: seconds from its start to the end of the
# longest chain of jobs that wait for it.
share=() rank=()
for i in "${!j_id[@]}"; do
  wall=${cost_wall[${j_name[i]}]:-30} cpu=${cost_cpu[${j_name[i]}]:-30}
  [ "$wall" -ge 1 ] || wall=1
  s=$((cpu * 100 / wall))
  [ $s -lt 10 ] && s=10
  [ $s -gt $((capacity * 100)) ] && s=$((capacity * 100))
  [ "${j_pass[i]}" = build ] && s=50  # niced: it takes what the tests leave
  share[i]=$s
  rank[i]=$wall
done
for i in "${!j_id[@]}"; do  # builds: their own time and their longest dependant's
  [ "${j_pass[i]}" = build ] || continue
  longest=0
  for k in "${!j_id[@]}"; do
    case " ${j_needs[k]} " in *" ${j_id[i]} "*) [ "${rank[k]}" -gt $longest ] && longest=${rank[k]} ;; esac
  done
  rank[i]=$((rank[i] + longest))
done
# The start order: alone jobs last, else the longest path first.
order=$(for i in "${!j_id[@]}"; do echo "${j_alone[i]} $((100000 - rank[i])) $i"; done | sort -n -k1,1 -k2,2 | awk '{print $3}')

# --- running them ------------------------------------------------------------------------------------
# start_job I: in a session of its own (so that it and everything it starts can be stopped as a
# group), with every signal at its default, output to its log; its CPU time (its processes and all
# they waited for) goes to $state/I.times when it ends.
start_job() {
  local i=$1
  (
    trap - INT TERM EXIT
    exec > "${j_log[i]}" 2>&1 < /dev/null
    if [ "${j_pass[i]}" = sanitized ]; then
      export SANITIZE=1 ASAN_OPTIONS=$asan_options UBSAN_OPTIONS=$ubsan_options
    else
      export SANITIZE=0
    fi
    setsid env --default-signal bash -c "${j_cmd[i]}" &
    echo $! > "$state/$i.pgid"
    wait $!
    status=$?
    times > "$state/$i.times"
    exit $status
  ) &
  j_pid[i]=$!
  j_start[i]=$SECONDS
  j_state[i]=running
  echo "--- started: ${j_name[i]}"
}

# stop_job I SIGNAL: SIGNAL to the job's whole session (its process group and the groups below it).
stop_job() {
  local pgid
  pgid=$(cat "$state/$1.pgid" 2> /dev/null) || return 0
  [ -n "$pgid" ] || return 0
  pkill "-$2" -s "$pgid" 2> /dev/null
  kill "-$2" -- "-$pgid" 2> /dev/null
}

# cpu_seconds FILE: the children's user + system time from the output of `times`.
cpu_seconds() {
  sed -n 2p "$1" 2> /dev/null | awk '{
    t = 0
    for (f = 1; f <= 2; f++) { split($f, p, "m"); sub("s", "", p[2]); t += p[1] * 60 + p[2] }
    printf "%d", t + 0.5 }'
}

# finish_job I STATUS: its verdict, its log, its times.
finish_job() {
  local i=$1 status=$2 verdict
  j_state[i]=done
  j_status[i]=$status
  j_wall[i]=$((SECONDS - j_start[i]))
  j_cpu[i]=$(cpu_seconds "$state/$i.times")
  [ -n "${j_cpu[i]}" ] || j_cpu[i]=0
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1)); verdict=passed
  elif [ "$status" -eq 77 ]; then
    skipped=$((skipped + 1)); verdict=skipped
  else
    failed=$((failed + 1)); failed_names+=("$i"); verdict="FAILED (exit status $status)"
  fi
  echo
  echo "=== ${j_name[i]}"
  cat "${j_log[i]}"
  echo "=== ${j_name[i]}: $verdict (${j_wall[i]} s, CPU ${j_cpu[i]} s)"
}

# ready I: every build it needs is done (a build that failed leaves its jobs to fail or skip).
ready() {
  local need k
  for need in ${j_needs[$1]}; do
    for k in "${!j_id[@]}"; do
      [ "${j_id[k]}" = "$need" ] && [ "${j_state[k]}" != done ] && return 1
    done
  done
  return 0
}

running=0 running_share=0 alone_running=0 last_start=-100 building=0
# idle: the CPUs idle over the last look at /proc/stat, in hundredths (read without a process); the
# time of niced processes (the builds) counts as idle: they give way to the tests.
idle=$((cpus * 100)) stat_total=0 stat_idle=0
look_at_cpus() {
  local _ user nice system idle_now iowait irq softirq steal total
  read -r _ user nice system idle_now iowait irq softirq steal _ < /proc/stat
  total=$((user + nice + system + idle_now + iowait + irq + softirq + steal))
  idle_now=$((idle_now + iowait + nice))
  [ $total -gt $stat_total ] && [ $stat_total -gt 0 ] &&
    idle=$(((idle_now - stat_idle) * cpus * 100 / (total - stat_total)))
  stat_total=$total stat_idle=$idle_now
}
# admit: starts jobs in order (builds one at a time) while the CPUs have room: half a CPU idle at the last look (each job
# started since counts its share against that), a second at least since the last start (a job takes
# a moment to get going), and the shares of the jobs running within TEST_CPUS (a job that does not
# fit is passed over for a smaller one). At least one job always runs. An alone job waits for an
# idle machine and keeps it.
admit() {
  local i room=$idle
  [ $alone_running = 1 ] && return 0
  for i in $order; do
    [ "${j_state[i]}" = waiting ] || continue
    ready "$i" || continue
    if [ "${j_alone[i]}" = 1 ]; then
      [ $running = 0 ] || return 0
      start_job "$i"; running=1; running_share=${share[i]}; alone_running=1
      return 0
    fi
    # One build at a time: make -j already fills the CPUs the tests leave.
    [ "${j_pass[i]}" = build ] && [ $building = 1 ] && continue
    if [ $running -gt 0 ]; then
      [ $running -ge "$max_jobs" ] && return 0
      [ $room -lt 50 ] || [ $((SECONDS - last_start)) -lt 1 ] && return 0
      [ $((running_share + share[i])) -gt $((capacity * 100)) ] && continue
    fi
    start_job "$i"
    [ "${j_pass[i]}" = build ] && building=1
    running=$((running + 1)); running_share=$((running_share + share[i])); last_start=$SECONDS
    room=$((room - share[i]))
  done
}

stop_all() {
  local i
  for i in "${!j_id[@]}"; do [ "${j_state[i]}" = running ] && stop_job "$i" TERM; done
  for _ in $(seq 100); do
    [ -z "$(jobs -rp)" ] && break
    sleep 0.1
  done
  for i in "${!j_id[@]}"; do [ "${j_state[i]}" = running ] && stop_job "$i" KILL; done
}
on_signal() {
  echo "run_all: stopped by SIG$1; stopping the jobs still running"
  trap - EXIT
  stop_all
  rm -rf "$state"
  exit $((128 + $(kill -l "$1")))
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'stop_all; rm -rf "$state"' EXIT

tick=
while :; do
  admit
  [ $running -gt 0 ] || break
  [ -n "$tick" ] || { sleep 1 & tick=$!; }
  done_pid=
  wait -n -p done_pid
  status=$?
  [ -n "$done_pid" ] || continue
  if [ "$done_pid" = "$tick" ]; then
    tick=
    look_at_cpus
    for i in "${!j_id[@]}"; do  # the deadline
      [ "${j_state[i]}" = running ] || continue
      elapsed=$((SECONDS - j_start[i])) limit=$job_deadline_s
      [ "${j_pass[i]}" = build ] && limit=$build_deadline_s
      if [ $elapsed -ge "$limit" ] && [ ! -e "$state/$i.stopped" ]; then
        echo "run_all: ${j_name[i]} still running after $limit s: stopped" | tee -a "${j_log[i]}"
        touch "$state/$i.stopped"
        stop_job "$i" TERM
      elif [ $elapsed -ge $((limit + 15)) ]; then
        stop_job "$i" KILL
      fi
    done
    continue
  fi
  for i in "${!j_id[@]}"; do
    [ "${j_pid[i]:-}" = "$done_pid" ] && [ "${j_state[i]}" = running ] || continue
    [ -e "$state/$i.stopped" ] && [ "$status" -eq 0 ] && status=124
    finish_job "$i" "$status"
    [ "${j_pass[i]}" = build ] && building=0
    running=$((running - 1)); running_share=$((running_share - share[i]))
    [ "${j_alone[i]}" = 1 ] && alone_running=0
  done
done
[ -n "$tick" ] && { kill "$tick" 2> /dev/null; wait "$tick" 2> /dev/null; }
for i in "${!j_id[@]}"; do  # a job that never started: a build it needed never ended (cannot happen)
  [ "${j_state[i]}" = waiting ] && { echo "=== ${j_name[i]}: not started"; failed=$((failed + 1)); failed_names+=("$i"); }
done

# --- the verdict ---------------------------------------------------------------------------------------
echo
echo "times (wall s, CPU s), longest first; $SECONDS s in all:"
total_cpu=0
{
  for i in "${!j_id[@]}"; do
    [ "${j_state[i]}" = done ] || continue
    total_cpu=$((total_cpu + j_cpu[i]))
    printf '%s\t%s\t%s\t%s\n' "${j_name[i]}" "${j_wall[i]}" "${j_cpu[i]}" "${j_status[i]}"
  done
} | sort -t $'\t' -k2,2nr > "$state/times.tsv"
awk -F '\t' '{ printf "  %5d %5d  %s\n", $2, $3, $1; cpu += $3 } END { printf "  CPU in all: %d s\n", cpu }' "$state/times.tsv"
# Only a whole run's times rank the next run's jobs (a quick run's would be a partial table).
[ "$only" = "  " ] && cp "$state/times.tsv" "$first_build/test-times.tsv"
echo
if [ $failed -gt 0 ]; then
  for i in "${failed_names[@]}"; do
    echo "--- ${j_name[i]} (exit status ${j_status[i]}):"
    if grep -q '^ *FAIL' "${j_log[i]}"; then grep '^ *FAIL' "${j_log[i]}" | head -n 20; else tail -n 15 "${j_log[i]}"; fi
  done
  printf 'failed: '; for i in "${failed_names[@]}"; do printf '%s; ' "${j_name[i]}"; done; echo
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
