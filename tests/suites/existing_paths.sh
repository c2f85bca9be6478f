#!/usr/bin/env bash
# existing_paths.sh: nothing that facegen did not write is ever replaced or removed.
#
#   what sits at an output's name   every kind of entry (an earlier output, an empty file, another
#                                   file, an empty folder, a folder of other files, a folder of PNGs,
#                                   links to a file, a folder and nothing, a FIFO, a device, a socket,
#                                   a mount point) at every output's name (txt, bmp, a numbered bmp,
#                                   npy, npy-u8, an npy shard, a tar shard, the png folder,
#                                   mosaic-png, --summary-json): replaced only
#                                   where facegen wrote it, else exit 1 and one sentence, before any
#                                   work. 1 process: every kind at the txt's name and the png
#                                   folder's (a folder's own rules); at each other output the kinds
#                                   its format tells apart (an earlier output, an empty file, another
#                                   file) and two of the rest in turn (one check for any output
#                                   that is a file: each of them meets at least one more output);
#                                   2 or 3 ranks (in turn) for every kind, at outputs in turn
#   inside the PNG folder           PNGs of either --png-layout (flat, subfolders) replaced by either;
#                                   a file, link, FIFO or mount point in place of a subfolder, a
#                                   subfolder of two digits, a foreign file, link or folder in a
#                                   subfolder, a subfolder inside one: refused, every entry as it was
#                                   (1 process; 2 or 3 ranks for every third kind)
#   folders as prefixes             --output ., .., DIR/. and DIR/..: refused in one sentence; every
#                                   prefix with both kinds of output (files, a folder) in 1 process,
#                                   and with one of them in turn on 2 and 3 ranks
#   a sticky shared folder          another user's earlier output and link (setpriv): refused
#   one run per prefix              a second run while the first holds the prefix fails in one
#                                   sentence naming it (1 process and 2 ranks); runs started together
#                                   never leave a mixed set; a lock left by SIGKILL is taken over;
#                                   a link or FIFO at the lock's name is refused
#   the folder changed mid-run      moved away and replaced by a file, a folder, or nothing, or removed:
#                                   one line naming it, no library noise, within a deadline (1 process,
#                                   2 ranks; 2 ranks also as they open the files, at four moments)
#   an earlier run's other outputs  named in the summary ("left") and the JSON, never removed
#   --summary-json                  - and /dev/stdout write the JSON to standard output; a missing
#                                   folder fails before any work
# Each refused case asserts the exit status, the one sentence, and that every entry around it (the
# output's folder and a victim folder that links point into) is byte for byte as it was, down to
# types, modes and link targets. Every run and every wait has a deadline, and every run starts with
# default signal dispositions. Usage: existing_paths.sh [build]
# runner: alone (beside the other suites on 2 CPUs it twice stopped printing in "the outputs' folder
# changed as 2 ranks open the files", one rank spinning at full CPU, until its 1,200 s deadline; not
# yet understood; alone it has passed in about 130 s)
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh existing_paths
build=${1:-build}
prog=$build/facegen
[ -x "$prog" ] || { echo "existing_paths: $prog is missing (run make test)"; exit 1; }
prog=$(realpath "$prog")  # the cases run from other folders too
launcher=$PWD/run_parallel.sh

work=$(mktemp -d /tmp/facegen-paths.XXXXXX)
chmod 755 "$work"  # a second user's cases reach their folder through it
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$work"
}
on_exit cleanup
root=no
[ "$(id -u)" = 0 ] && root=yes
mpi=no
command -v mpirun > /dev/null && mpi=yes

# snapshot DIR...: every entry below each DIR: type, mode, owner, path, link target, and a regular
# file's hash (a FIFO, device or socket is never opened).
snapshot() {
  local dir
  for dir in "$@"; do
    (cd "$dir" && find . -printf '%y %m %U %p -> %l\n' | sort && find . -type f -exec sha256sum {} + | sort)
  done
}

# run RANKS PREFIX ARGS...: 2 random images into PREFIX by facegen (RANKS 1) or run_parallel.sh (2, 3),
# with a deadline and default signals; stdout to $work/stdout, stderr to $work/stderr; the status.
run() {
  local ranks=$1 prefix=$2
  shift 2
  if [ "$ranks" = 1 ]; then
    env --default-signal timeout 60 "$prog" --random 2 --output "$prefix" "$@" > "$work/stdout" 2> "$work/stderr"
  else
    env --default-signal timeout 60 "$launcher" --program "$prog" --ranks-per-node "$ranks" --random 2 \
      --output "$prefix" -- "$@" > "$work/stdout" 2> "$work/stderr"
  fi
}

# facegen_lines: the lines facegen said (a parallel job's launcher adds its own).
facegen_lines() { grep -c '^facegen: ' "$work/stderr"; }

# --- what sits at an output's name -------------------------------------------------------------------
# The outputs: LABEL|NAME|FLAGS[|ALSO]: the name relative to the case folder (r is the prefix), the
# run's flags, and another output the run writes beside it.
outputs=(
  "txt|r.txt|--formats txt"
  "bmp|r.bmp|--formats bmp"
  "numbered bmp|r-0002.bmp|--formats bmp --mosaic-tiles 1|r-0001.bmp"
  "npy|r.npy|--formats npy"
  "npy-u8|r.u8.npy|--formats npy-u8"
  "npy shard|r-000001.npy|--formats npy --shard-images 1|r-000000.npy"
  "tar shard|r-000001.tar|--formats tar --shard-images 1|r-000000.tar"
  "png folder|r|--formats png"
  "mosaic-png|r.png|--formats mosaic-png"
  "summary json|s.json|--formats txt --summary-json CASE/s.json|r.txt"
)
kinds=(facegen empty-file foreign-file empty-folder folder-of-files folder-of-pngs link-to-file link-to-folder
       dangling-link fifo device socket mount-point)

# place KIND PATH EXTENSION VICTIM: puts an entry of KIND at PATH (links point into VICTIM).
place() {
  local kind=$1 path=$2 ext=$3 victim=$4
  case $kind in
    facegen) if [ "$ext" = folder ]; then mkdir "$path" && echo old > "$path/000000.png"
             else earlier_output "$ext" "old" > "$path"; fi ;;
    empty-file) : > "$path" ;;
    foreign-file) echo "my notes" > "$path" ;;
    empty-folder) mkdir "$path" ;;
    folder-of-files) mkdir -p "$path/sub" && echo important > "$path/important.txt" && echo x > "$path/sub/y" ;;
    folder-of-pngs) mkdir "$path" && echo png > "$path/000001.png" ;;
    link-to-file) earlier_output txt "victim's" > "$victim/target.txt" && ln -s "$victim/target.txt" "$path" ;;
    link-to-folder) mkdir -p "$victim/folder" && echo mine > "$victim/folder/000000.png" && ln -s "$victim/folder" "$path" ;;
    dangling-link) ln -s "$victim/nothing" "$path" ;;
    fifo) mkfifo "$path" ;;
    device) mknod "$path" c 1 3 ;;
    socket) python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$path" ;;
    mount-point) mkdir "$path" && mount -t tmpfs -o size=1m tmpfs "$path" && mounts+=("$path") ;;
  esac
}

# verdict KIND EXTENSION: "ok" where facegen may replace it, else the pattern of the reason.
verdict() {
  local kind=$1 ext=$2
  case $kind in
    facegen|empty-file) [ "$ext" = folder ] && { [ "$kind" = facegen ] && echo ok || echo "is a file, where the PNG folder goes"; } || echo ok ;;
    foreign-file) [ "$ext" = folder ] && echo "is a file, where the PNG folder goes" || echo "is not a [A-Za-z ]+ of facegen \(its first bytes differ\)" ;;
    empty-folder) [ "$ext" = folder ] && echo ok || echo "is a folder, where the [A-Za-z ]+ goes" ;;
    folder-of-files) [ "$ext" = folder ] && echo "holds (important.txt|sub) and 1 more entry, which facegen does not write there" || echo "is a folder, where the [A-Za-z ]+ goes" ;;
    folder-of-pngs) [ "$ext" = folder ] && echo ok || echo "is a folder, where the [A-Za-z ]+ goes" ;;
    link-to-file|link-to-folder|dangling-link) echo "is a symbolic link, which facegen never follows nor replaces" ;;
    fifo) echo "is a FIFO" ;;
    device) echo "is a character device" ;;
    socket) echo "is a socket" ;;
    mount-point) echo "is a mount point" ;;
  esac
}

# written_by_run NAME...: a snapshot's lines less those of the entries NAME... (and what is in them).
written_by_run() {
  local pattern=$(printf '%s\n' "$@" | sed 's/[.]/[.]/g' | paste -sd'|')
  grep -vE " [.]/($pattern)( |/|\$)"
}

# output_case RANKS KIND OUTPUT-ENTRY: one kind of entry at one output's name.
case_number=0
output_case() {
  local ranks=$1 kind=$2 entry=$3
  local label name args also ext
  IFS='|' read -r label name args also <<< "$entry"
  ext=${name##*.}
  [ "$name" = r ] && ext=folder
  [ "${name%.u8.npy}" != "$name" ] && ext=u8.npy
  case $kind in device|mount-point) [ $root = yes ] || { skip "$kind at the $label's name: needs root"; return; } ;; esac
  case_number=$((case_number + 1))
  local dir=$work/case$case_number victim=$work/victim$case_number
  mkdir -p "$dir" "$victim"
  echo "unrelated" > "$dir/unrelated.txt"
  place "$kind" "$dir/$name" "$ext" "$victim"
  local want before after got
  want=$(verdict "$kind" "$ext")
  before=$(snapshot "$dir" "$victim")
  # shellcheck disable=SC2086  # the format's flags are words
  run "$ranks" "$dir/r" --device synthetic ${args//CASE/$dir} -q
  got=$?
  local name_shown="$kind at the $label's name ($ranks rank$([ "$ranks" = 1 ] || echo s))"
  if [ "$want" = ok ]; then
    after=$(snapshot "$dir" "$victim" | written_by_run "$name" "${also:-$name}")
    before=$(echo "$before" | written_by_run "$name" "${also:-$name}")
    if [ $got -ne 0 ]; then
      fail "$name_shown" "exit status $got, expected 0: $(head -c 300 "$work/stderr")"
    elif [ "$before" != "$after" ]; then
      fail "$name_shown" "something beside the output changed: $(diff <(echo "$before") <(echo "$after") | head -5)"
    elif [ -L "$dir/$name" ] || [ ! -e "$dir/$name" ]; then
      fail "$name_shown" "the output is not in place"
    elif ls -A "$dir" | grep -q 'tmp-\|facegen-lock\|facegen-commit\|facegen-old'; then
      fail "$name_shown" "left behind: $(ls -A "$dir" | tr '\n' ' ')"
    else
      pass "$name_shown: replaced"
    fi
  else
    after=$(snapshot "$dir" "$victim")
    if [ $got -ne 1 ]; then
      fail "$name_shown" "exit status $got, expected 1: $(head -c 300 "$work/stderr")"
    elif [ "$(facegen_lines)" != 1 ] || ! grep -qE "^facegen: error.*: cannot write the .* $dir/$name: it $want; facegen replaces only what it wrote" "$work/stderr"; then
      fail "$name_shown" "expected one line saying it $want: $(head -c 400 "$work/stderr")"
    elif [ "$before" != "$after" ]; then
      fail "$name_shown" "the folder changed: $(diff <(echo "$before") <(echo "$after") | head -5)"
    else
      pass "$name_shown: $(grep '^facegen: ' "$work/stderr" | sed 's/.*: it //; s/; facegen replaces.*//')"
    fi
  fi
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  mounts=()
  rm -rf "$dir" "$victim"
}

echo "what sits at an output's name, one process:"
format_kinds=(facegen empty-file foreign-file)
other_kinds=("${kinds[@]:3}")
k=0
for entry in "${outputs[@]}"; do
  case $entry in
    "txt|"*|"png folder|"*) for kind in "${kinds[@]}"; do output_case 1 "$kind" "$entry"; done ;;
    *)
      for kind in "${format_kinds[@]}"; do output_case 1 "$kind" "$entry"; done
      for _ in 1 2; do
        output_case 1 "${other_kinds[$((k % ${#other_kinds[@]}))]}" "$entry"
        k=$((k + 1))
      done ;;
  esac
done
if [ $mpi = yes ]; then
  echo "what sits at an output's name, 2 and 3 ranks (every kind once, the outputs and rank counts in turn):"
  k=0
  for kind in "${kinds[@]}"; do
    output_case $((2 + k % 2)) "$kind" "${outputs[$(((k * 3) % ${#outputs[@]}))]}"
    k=$((k + 1))
  done
else
  skip "2 and 3 ranks: mpirun is not installed"
fi

# --- the PNG folder's subfolders (--png-layout subfolders) -------------------------------------------
# What sits inside a folder at the PNG folder's name, at every level of the subfolders layout: PNGs
# of either layout are facegen's (either layout replaces either); anything else at the top, in a
# subfolder or in place of one is refused before any work, every entry as it was.
# place_inside KIND FOLDER VICTIM: the entries of KIND inside FOLDER; sets $foreign to what the
# refusal names ("" where facegen may replace the folder).
place_inside() {
  local kind=$1 f=$2 victim=$3
  mkdir -p "$f"
  foreign=
  case $kind in
    subfolders-output) mkdir "$f/000" "$f/001" && echo a > "$f/000/000000.png" && echo b > "$f/001/001000.png" ;;
    flat-output) echo a > "$f/000000.png" && echo b > "$f/000001.png" ;;
    both-layouts) mkdir "$f/000" && echo a > "$f/000/000000.png" && echo b > "$f/000001.png" ;;
    empty-subfolder) mkdir "$f/000" ;;
    file-as-subfolder) echo x > "$f/000"; foreign=000 ;;
    link-as-subfolder) mkdir -p "$victim/pngs" && echo v > "$victim/pngs/000000.png" && ln -s "$victim/pngs" "$f/000"; foreign=000 ;;
    fifo-as-subfolder) mkfifo "$f/000"; foreign=000 ;;
    mount-as-subfolder) mkdir "$f/000" && mount -t tmpfs -o size=1m tmpfs "$f/000" && mounts+=("$f/000"); foreign=000 ;;
    short-subfolder) mkdir "$f/12" && echo a > "$f/12/012000.png"; foreign=12 ;;
    foreign-in-subfolder) mkdir "$f/000" && echo a > "$f/000/000000.png" && echo notes > "$f/000/notes.txt"; foreign=000/notes.txt ;;
    link-in-subfolder) mkdir "$f/000" && echo v > "$victim/v.png" && ln -s "$victim/v.png" "$f/000/000000.png"; foreign=000/000000.png ;;
    folder-in-subfolder) mkdir -p "$f/000/000000.png"; foreign=000/000000.png ;;
    deeper-subfolder) mkdir -p "$f/000/001" && echo a > "$f/000/001/001000.png"; foreign=000/001 ;;
  esac
}
subfolder_case() {  # subfolder_case RANKS KIND LAYOUT
  local ranks=$1 kind=$2 layout=$3
  case $kind in mount-*) [ $root = yes ] || { skip "$kind inside the PNG folder: needs root"; return; } ;; esac
  case_number=$((case_number + 1))
  local dir=$work/case$case_number victim=$work/victim$case_number foreign before after got
  mkdir -p "$dir" "$victim"
  place_inside "$kind" "$dir/r" "$victim"
  before=$(snapshot "$dir" "$victim")
  run "$ranks" "$dir/r" --device synthetic --formats png --png-layout "$layout" -q
  got=$?
  after=$(snapshot "$dir" "$victim")
  local shown="$kind inside the PNG folder, --png-layout $layout ($ranks rank$([ "$ranks" = 1 ] || echo s))"
  if [ -z "$foreign" ]; then
    local want=000000.png
    [ "$layout" = subfolders ] && want=000/000000.png
    if [ $got -ne 0 ]; then
      fail "$shown" "exit status $got, expected 0: $(head -c 300 "$work/stderr")"
    elif [ "$(cd "$dir/r" && find . -mindepth 1 | sort | paste -sd' ')" != "$([ "$layout" = subfolders ] && echo ./000 ./000/000000.png ./000/000001.png || echo ./000000.png ./000001.png)" ]; then
      fail "$shown" "the new folder holds: $(cd "$dir/r" && find . -mindepth 1 | sort | paste -sd' ')"
    elif ! cmp -s "$dir/r/$want" "$work/inside-ref/000000.png"; then
      fail "$shown" "$want is not the flat layout's 000000.png"
    elif ls -A "$dir" | grep -q 'tmp-\|facegen-'; then
      fail "$shown" "left behind: $(ls -A "$dir" | tr '\n' ' ')"
    else
      pass "$shown: replaced"
    fi
  elif [ $got -ne 1 ]; then
    fail "$shown" "exit status $got, expected 1: $(head -c 300 "$work/stderr")"
  elif [ "$(facegen_lines)" != 1 ] || ! grep -qF "cannot write the PNG folder $dir/r: it holds $foreign, which facegen does not write there; facegen replaces only what it wrote" "$work/stderr"; then
    fail "$shown" "expected one line naming $foreign: $(head -c 400 "$work/stderr")"
  elif [ "$before" != "$after" ]; then
    fail "$shown" "the folder changed: $(diff <(echo "$before") <(echo "$after") | head -5)"
  else
    pass "$shown: $(grep '^facegen: ' "$work/stderr" | sed 's/.*: it //; s/; facegen replaces.*//')"
  fi
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  mounts=()
  rm -rf "$dir" "$victim"
}
echo "inside the PNG folder, at every level of its subfolders:"
run 1 "$work/inside-ref" --device synthetic --formats png -q || fail "the flat reference" "$(head -c 300 "$work/stderr")"
inside_kinds=(subfolders-output flat-output both-layouts empty-subfolder file-as-subfolder link-as-subfolder
              fifo-as-subfolder mount-as-subfolder short-subfolder foreign-in-subfolder link-in-subfolder
              folder-in-subfolder deeper-subfolder)
k=0
for kind in "${inside_kinds[@]}"; do
  subfolder_case 1 "$kind" subfolders
  case $kind in subfolders-output|both-layouts|link-as-subfolder|foreign-in-subfolder) subfolder_case 1 "$kind" flat ;; esac
  if [ $mpi = yes ] && [ $((k % 3)) = 0 ]; then subfolder_case $((2 + k % 2)) "$kind" subfolders; fi
  k=$((k + 1))
done

# --- folders as prefixes -----------------------------------------------------------------------------
echo "folders as prefixes:"
mkdir -p "$work/prefixes/inner"
echo "unrelated" > "$work/prefixes/inner/unrelated.txt"
before=$(snapshot "$work/prefixes")
for ranks in 1 2 3; do
  [ $ranks = 1 ] || [ $mpi = yes ] || continue
  turn=0
  for prefix in . .. "$work/prefixes/inner/." "$work/prefixes/inner/.." "$work/prefixes/inner/"; do
    all_formats=(txt,bmp png)
    [ $ranks = 1 ] || { all_formats=("${all_formats[$(((turn + ranks) % 2))]}"); turn=$((turn + 1)); }
    for formats in "${all_formats[@]}"; do
      (cd "$work/prefixes/inner" && run "$ranks" "$prefix" --device synthetic --formats "$formats" -q)
      got=$?
      name="--output $prefix --formats $formats ($ranks rank$([ $ranks = 1 ] || echo s))"
      if [ $got -ne 1 ] || [ "$(facegen_lines)" != 1 ] ||
         ! grep -q "^facegen: error: --output takes a path prefix such as outputs/run1 .*, got '$prefix'" "$work/stderr"; then
        fail "$name" "exit status $got: $(head -c 300 "$work/stderr")"
      elif [ "$(snapshot "$work/prefixes")" != "$before" ]; then
        fail "$name" "the folders changed"
      else
        pass "$name: refused"
      fi
    done
  done
done

# --- a sticky shared folder (as /tmp): another user's entries ------------------------------------
if [ $root = yes ] && command -v setpriv > /dev/null; then
  echo "a sticky shared folder:"
  shared=$work/shared
  mkdir -m 1777 "$shared"
  as_other() { setpriv --reuid=4242 --regid=4242 --clear-groups env --default-signal timeout 20 "$@"; }
  as_other sh -c "$(declare -f earlier_output); earlier_output txt theirs > '$shared/r.txt'; ln -s /etc/hostname '$shared/r.bmp'"
  # refused_in_shared NAME PATTERN STATUS: the run just made exited STATUS = 1, said PATTERN, and left
  # the shared folder as $before.
  refused_in_shared() {
    if [ "$3" -eq 1 ] && grep -q "$2" "$work/stderr" && [ "$(snapshot "$shared")" = "$before" ]; then
      pass "$1: refused, left as it was"
    else
      fail "$1" "exit status $3: $(head -c 300 "$work/stderr")"
    fi
  }
  before=$(snapshot "$shared")
  run 1 "$shared/r" --device synthetic --formats txt -q
  refused_in_shared "another user's earlier output in a sticky folder" \
    "r.txt: it belongs to another user (uid 4242) in a shared folder" $?
  run 1 "$shared/r" --device synthetic --formats bmp -q
  refused_in_shared "another user's link at an output's name in a sticky folder" "r.bmp: it is a symbolic link" $?
  # The other user runs into the shared folder while root's earlier outputs are there.
  run 1 "$shared/mine" --device synthetic --formats txt -q
  before=$(snapshot "$shared")
  as_other "$prog" --device synthetic --random 2 --output "$shared/mine" --formats txt -q > /dev/null 2> "$work/stderr"
  refused_in_shared "a second user's run over root's outputs in a sticky folder" \
    "mine.txt: it belongs to another user (uid 0) in a shared folder" $?
else
  skip "a sticky shared folder: needs root and setpriv"
fi

# --- one run per prefix --------------------------------------------------------------------------------
echo "one run per prefix:"
# wait_for GLOB SECONDS: until a path matching GLOB exists.
wait_for() {
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    compgen -G "$1" > /dev/null && return 0
    nap 0.02
  done
  return 1
}
# start_slow_run RANKS PREFIX: 400 images on the CPU into PREFIX (txt), in the background ($job).
start_slow_run() {
  local ranks=$1 prefix=$2
  if [ "$ranks" = 1 ]; then
    env --default-signal timeout 120 "$prog" --device cpu --model "$build/random-network.bin" --random 400 \
      --output "$prefix" --formats txt -q > /dev/null 2> "$prefix.first.err" &
  else
    env --default-signal timeout 120 "$launcher" --program "$prog" --ranks-per-node "$ranks" --random 400 \
      --output "$prefix" -- --device cpu --model "$build/random-network.bin" --formats txt -q \
      > /dev/null 2> "$prefix.first.err" &
  fi
  job=$!
}
# The first run reads 400 latents from a file and stops itself (SIGSTOP, FACEGEN_TEST_STOP: rank 0, once
# its first latents are read, which is after it took the lock and made its outputs); the second run
# starts while it is stopped, then the first is let go. No race with how fast either starts.
"$build/make-latents" --count 400 --seed 5 --output "$work/l400.txt" > /dev/null
# stopped_pids PATTERN: the processes whose command line matches PATTERN and that are stopped.
stopped_pids() {
  local p
  for p in $(pgrep -f -- "$1"); do stopped "$p" && echo "$p"; done
}
# stop_processes PREFIX: stops the facegen processes writing PREFIX, waits (5 s at most) until each
# is stopped, and prints their pids.
stop_processes() {
  local p pids=
  for p in $(pgrep -f -- "--output $1( |$)"); do [ /proc/$p/exe -ef "$prog" ] && pids="$pids $p"; done
  [ -n "$pids" ] || return 0
  kill -STOP $pids
  local deadline=$((SECONDS + 5))
  for p in $pids; do
    while [ $SECONDS -lt $deadline ] && ! stopped "$p"; do nap 0.01; done
  done
  echo $pids
}
held_run_case() {  # held_run_case FIRST-RANKS SECOND-RANKS
  local first=$1 second=$2 dir=$work/held$1$2
  mkdir -p "$dir"
  local name="a second run ($second rank$([ $second = 1 ] || echo s)) while one ($first) holds the prefix"
  if [ "$first" = 1 ]; then
    FACEGEN_TEST_STOP=0:latents-read env --default-signal timeout 120 "$prog" --device cpu \
      --model "$build/random-network.bin" --input "$work/l400.txt" --output "$dir/r" --formats txt -q \
      > /dev/null 2> "$dir/r.first.err" &
  else
    FACEGEN_TEST_STOP=0:latents-read env --default-signal timeout 120 "$launcher" --program "$prog" \
      --ranks-per-node "$first" --input "$work/l400.txt" --output "$dir/r" -- --device cpu \
      --model "$build/random-network.bin" --formats txt -q > /dev/null 2> "$dir/r.first.err" &
  fi
  job=$!
  local stopped= deadline=$((SECONDS + 60))
  while [ -z "$stopped" ] && [ $SECONDS -lt $deadline ] && kill -0 $job 2> /dev/null; do
    stopped=$(stopped_pids "--output $dir/r")
    [ -n "$stopped" ] || nap 0.05
  done
  if [ -z "$stopped" ]; then
    kill $job 2> /dev/null
    wait_pid $job 150
    fail "$name" "the first run did not stop after reading its first latents: $(head -c 300 "$dir/r.first.err")"
    return
  fi
  local lock
  lock=$(compgen -G "$dir/.facegen-lock-*")
  run "$second" "$dir/r" --device synthetic --formats txt
  local got=$?
  kill -CONT $stopped
  wait_pid $job 150
  local first_status=$?
  if [ $got -ne 1 ] || [ "$(facegen_lines)" != 1 ] ||
     ! grep -qE "^facegen: error.*: another facegen run \(pid [0-9]+\) is writing the outputs of --output $dir/r now; facegen runs one at a time into a prefix" "$work/stderr"; then
    fail "$name" "exit status $got: $(head -c 300 "$work/stderr")"
  elif [ $first_status -ne 0 ]; then
    fail "$name" "the first run failed ($first_status): $(head -c 300 "$dir/r.first.err")"
  elif [ -z "$lock" ] || [ -e "$lock" ] || [ "$(ls -A "$dir" | tr '\n' ' ')" != "r.first.err r.txt " ]; then
    fail "$name" "lock file '$lock'; entries left: $(ls -A "$dir" | tr '\n' ' ')"
  elif [ "$(head -n 1 "$dir/r.txt")" != 400 ]; then
    fail "$name" "r.txt is not the first run's: $(head -c 40 "$dir/r.txt")"
  else
    pass "$name: refused in one sentence; the first run's outputs whole, its lock gone"
  fi
}
held_run_case 1 1
if [ $mpi = yes ]; then
  held_run_case 2 1
  held_run_case 1 3
else
  skip "one run per prefix under MPI: mpirun is not installed"
fi

# Runs started together: never a set of outputs mixed from both (either may be refused).
mkdir -p "$work/together" "$work/reference"
for seed in 1 2; do
  timeout 60 "$prog" --device synthetic --random 3 --seed $seed --output "$work/reference/s$seed" --formats txt,bmp,npy -q
done
mixed=0
refused=0
for attempt in 1 2 3 4 5 6; do
  pids=
  for seed in 1 2; do
    env --default-signal timeout 60 "$prog" --device synthetic --random 3 --seed $seed --output "$work/together/r" \
      --formats txt,bmp,npy -q > /dev/null 2> "$work/together-$seed.err" &
    pids="$pids $!"
  done
  for pid in $pids; do wait_pid $pid 90; done
  refused=$((refused + $(cat "$work"/together-*.err | grep -c "another facegen run")))
  whole=no
  for seed in 1 2; do
    cmp -s "$work/together/r.txt" "$work/reference/s$seed.txt" && cmp -s "$work/together/r.bmp" "$work/reference/s$seed.bmp" &&
      cmp -s "$work/together/r.npy" "$work/reference/s$seed.npy" && whole=yes
  done
  [ $whole = yes ] || mixed=$((mixed + 1))
done
if [ $mixed -eq 0 ] && [ "$(ls -A "$work/together" | tr '\n' ' ')" = "r.bmp r.npy r.txt " ]; then
  pass "two runs into one prefix started together, 6 times: one run's whole set each time ($refused refused)"
else
  fail "two runs started together" "$mixed mixed sets; entries: $(ls -A "$work/together" | tr '\n' ' ')"
fi

# A lock left by a run that was killed (no handler) is taken over; what is not a lock file is refused.
mkdir -p "$work/killed"
start_slow_run 1 "$work/killed/r"
if wait_for "$work/killed/r.txt.tmp-*" 60 && kill -9 "$(pgrep -P $job)"; then  # facegen, timeout's child
  wait_pid $job 150 2> /dev/null
  rm -f "$work"/killed/r.txt.tmp-* "$work/killed/r.first.err"
  run 1 "$work/killed/r" --device synthetic --formats txt -q
  got=$?
  if [ $got -eq 0 ] && [ "$(ls -A "$work/killed" | tr '\n' ' ')" = "r.txt " ]; then
    pass "a lock left by a killed run: the next run takes it over and removes it"
  else
    fail "a lock left by a killed run" "exit status $got, entries $(ls -A "$work/killed" | tr '\n' ' '): $(head -c 300 "$work/stderr")"
  fi
else
  kill -9 $job 2> /dev/null
  wait_pid $job 150 2> /dev/null
  fail "a lock left by a killed run" "the run did not create its output"
fi
for shape in link fifo folder; do
  dir=$work/lock-$shape
  mkdir -p "$dir"
  name=$(python3 -c 'import sys  # the lock file of prefix r (commit/prefix_lock.cpp): FNV-1a of the name
h = 14695981039346656037
for c in sys.argv[1].encode(): h = ((h ^ c) * 1099511628211) % 2**64
print(".facegen-lock-%016x" % h)' r)
  case $shape in
    link) ln -s "$work/victim-lock" "$dir/$name"; want="is a symbolic link, which facegen never follows" ;;
    fifo) mkfifo "$dir/$name"; want="is not a regular file" ;;
    folder) mkdir "$dir/$name"; want="is not a regular file" ;;
  esac
  before=$(snapshot "$dir")
  run 1 "$dir/r" --device synthetic --formats txt -q
  got=$?
  if [ $got -eq 1 ] && [ "$(facegen_lines)" = 1 ] && grep -q "the lock file $dir/$name of --output $dir/r $want" "$work/stderr" &&
     [ "$(snapshot "$dir")" = "$before" ] && [ ! -e "$work/victim-lock" ]; then
    pass "a $shape at the lock file's name: refused, nothing followed or changed"
  else
    fail "a $shape at the lock file's name" "exit status $got: $(head -c 300 "$work/stderr")"
  fi
done

# --- the outputs' folder moved, removed or replaced mid-run -----------------------------------------
echo "the outputs' folder changed mid-run:"
# folder_change_case NAME DIR CHANGE ERR: once the run ($job, its stderr in ERR) is at the moment wanted,
# DIR/out is moved to DIR/moved and CHANGE (file, gone, folder) takes its place, or it is removed with
# all it holds (removed); the stopped ranks, if any ($stopped), go on; the run must end within its
# deadline with exit 1 and one line naming the change, and leave what took the folder's place as it was.
folder_change_case() {
  local name=$1 dir=$2 change=$3 err_file=$4 what got err lines
  mv "$dir/out" "$dir/moved"
  case $change in
    file) echo x > "$dir/out"; what="a file is there now" ;;
    gone) what="it is gone" ;;
    removed) rm -rf "$dir/moved"; what="it is gone" ;;
    folder) mkdir "$dir/out"; what="another folder is there now" ;;
  esac
  [ -n "$stopped" ] && kill -CONT $stopped
  wait_pid $job 30
  got=$?
  err=$(cat "$err_file")
  lines=$(grep -c '^facegen' "$err_file")
  if [ $got -eq 124 ]; then
    fail "$name" "still running after 30 s (stopped): $err"
  elif [ $got -ne 1 ] || [ "$lines" != 1 ] ||
     ! grep -q "^facegen: error.*: the output folder $dir/out was moved, removed or replaced while the run wrote into it ($what): no output was put in place" "$err_file" ||
     grep -q 'mca_\|warning' "$err_file"; then
    fail "$name" "exit status $got: $err"
  elif [ $change = file ] && [ "$(cat "$dir/out")" != x ] || [ $change = folder ] && [ -n "$(ls -A "$dir/out")" ]; then
    fail "$name" "what took the folder's place was changed"
  else
    pass "$name: one line naming the folder"
  fi
}
# Mid-run: the run is writing (its first output exists), one process and 2 ranks.
for ranks in 1 2; do
  for change in file gone folder; do
    [ $ranks = 2 ] && [ $change != folder ] && continue  # 2 ranks: the moments below take the others
    [ $ranks = 2 ] && [ $mpi = no ] && { skip "the outputs' folder changed mid-run (2 ranks): mpirun is not installed"; continue; }
    dir=$work/moving$ranks$change
    mkdir -p "$dir/out"
    start_slow_run "$ranks" "$dir/out/r"
    stopped=
    name="the outputs' folder replaced by a $change mid-run ($ranks rank$([ $ranks = 1 ] || echo s))"
    [ $change = gone ] && name="the outputs' folder removed mid-run ($ranks rank$([ $ranks = 1 ] || echo s))"
    if ! wait_for "$dir/out/r.txt.tmp-*" 60; then
      wait_pid $job 150
      fail "$name" "the run did not create its output"
      continue
    fi
    # The ranks are stopped while the folder changes: one that looked between the move and the new
    # folder would rightly say "it is gone" (it once did, under load); folder_change_case lets them go.
    stopped=$(stop_processes "$dir/out/r")
    folder_change_case "$name" "$dir" "$change" "$dir/moved/r.first.err"
  done
done
# 2 ranks, as they make their files (FACEGEN_TEST_STOP; each rank makes the shards of its own share):
# before a rank makes its first file (rank 0 first, then the others), and once it made it. (When the
# ranks opened rank 0's files through MPI-IO, a rank that could not create OpenMPI's own files beside
# an output once went on without them, and the job then waited in MPI_File_close for ever.)
if [ $mpi = yes ]; then
  for moment in 1:outputs-open:file 0:outputs-open:gone 1:outputs-checked:removed 0:outputs-checked:folder; do
    IFS=: read -r rank point change <<< "$moment"
    dir=$work/opening$rank$point
    mkdir -p "$dir/out"
    name="the outputs' folder replaced by a $change as the ranks open the files (rank $rank at $point)"
    [ $change = gone ] && name="the outputs' folder moved away as the ranks open the files (rank $rank at $point)"
    [ $change = removed ] && name="the outputs' folder removed (rm -rf) as the ranks open the files (rank $rank at $point)"
    FACEGEN_TEST_STOP=$rank:$point env --default-signal timeout 60 "$launcher" --program "$prog" --ranks-per-node 2 \
      --random 4 --output "$dir/out/r" -- --device synthetic --all-ranks --formats tar --shard-images 2 -q > /dev/null \
      2> "$dir/r.err" &
    job=$!
    stopped= deadline=$((SECONDS + 30))
    while [ -z "$stopped" ] && [ $SECONDS -lt $deadline ] && kill -0 $job 2> /dev/null; do
      stopped=$(stopped_pids "--output $dir/out/r")
      [ -n "$stopped" ] || nap 0.02
    done
    if [ -z "$stopped" ]; then
      wait_pid $job 30
      fail "$name" "rank $rank did not stop at $point: $(head -c 300 "$dir/r.err")"
      continue
    fi
    folder_change_case "$name" "$dir" "$change" "$dir/r.err"
  done
else
  skip "the outputs' folder changed as 2 ranks open the files: mpirun is not installed"
fi

# --- an earlier run's other outputs ----------------------------------------------------------------
echo "an earlier run's other outputs:"
dir=$work/stale
mkdir -p "$dir"
run 1 "$dir/r" --device synthetic --formats bmp,npy,png --mosaic-tiles 1 -q  # r-0001.bmp, r-0002.bmp, r.npy, r/
before=$(snapshot "$dir" | grep -vE ' [.]/r[.]bmp( |$)')
run 1 "$dir/r" --device synthetic --formats bmp,txt --summary-json "$dir/s.json"
got=$?
left_line=$(grep '^left ' "$work/stdout")
json_left=$(python3 -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))["stale_files"]))' "$dir/s.json" 2>&1)
if [ $got -eq 0 ] &&
   [ "$left_line" = "left      $dir/r, $dir/r-0001.bmp, $dir/r-0002.bmp and 1 more: outputs of an earlier run with this prefix that this run did not replace" ] &&
   [ "$json_left" = "$dir/r $dir/r-0001.bmp $dir/r-0002.bmp $dir/r.npy" ] &&
   [ "$(snapshot "$dir" | grep -vE ' [.]/(r[.]bmp|r[.]txt|s[.]json)( |$)')" = "$before" ]; then
  pass "a run with other formats and fewer images: the earlier run's other outputs named in the summary and the JSON, all kept"
else
  fail "an earlier run's other outputs" "exit status $got; left: '$left_line'; JSON: '$json_left'"
fi

# --- --summary-json ------------------------------------------------------------------------------------
echo "--summary-json:"
for target in - /dev/stdout; do
  dir=$work/summary-stdout
  rm -rf "$dir" && mkdir -p "$dir"
  run 1 "$dir/r" --device synthetic --formats txt --summary-json "$target"
  got=$?
  images=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["images"])' "$work/stdout" 2>&1)
  if [ $got -eq 0 ] && [ "$images" = 2 ] && [ -c /dev/null ] && [ -e /dev/stdout ]; then
    pass "--summary-json $target: the JSON alone on standard output"
  else
    fail "--summary-json $target" "exit status $got, JSON: $images"
  fi
done
dir=$work/summary-missing
mkdir -p "$dir"
earlier_output txt old > "$dir/r.txt"
before=$(snapshot "$dir")
run 1 "$dir/r" --device synthetic --formats txt --summary-json "$dir/nofolder/s.json"
got=$?
if [ $got -eq 1 ] && [ "$(facegen_lines)" = 1 ] &&
   grep -q "^facegen: error: --summary-json $dir/nofolder/s.json cannot be written: its folder $dir/nofolder does not exist" "$work/stderr" &&
   [ "$(snapshot "$dir")" = "$before" ]; then
  pass "--summary-json in a folder that does not exist: refused before any work, the outputs as they were"
else
  fail "--summary-json in a missing folder" "exit status $got: $(head -c 300 "$work/stderr")"
fi

suite_end
