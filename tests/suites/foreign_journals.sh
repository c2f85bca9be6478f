#!/usr/bin/env bash
# foreign_journals.sh: files with a commit journal's name that this user's facegen did not write are
# left exactly as they are, by a run into their folder and by --finish-commit, however they are made.
#
# An attacker (uid 4242, setpriv) plants, in a folder it may write (a victim's folder of mode 0777,
# and a sticky shared one of mode 1777, as /tmp is), journals of every shape: well-formed ones whose
# entries name the victim's files and folders by their inodes (which an earlier facegen unlinked or
# removed recursively), links to the victim's files and folders, a FIFO (which hung every run), a
# sparse file of 4 GiB (which was read whole), a folder. Beside them, the user running facegen has
# journals of its own that facegen did not write: names outside its own, group-writable, no entry,
# 4 GiB, a FIFO, a temporary that is not the output's. Each of root and the victim (uid 4243) then
# runs facegen into the folder and --finish-commit on each journal:
#   a run:            exit 0, one notice "left alone: PATH is not a commit journal of this user's
#                     facegen (WHY)" per planted journal, its own outputs committed
#   --finish-commit:  exit 1, one line "PATH is not a commit journal of this user's facegen (WHY);
#                     nothing was changed"
# and afterwards every file of the victim, planted or not, is byte-identical (kind, owner, mode,
# size, link target, sha256 of each file of under 2 MiB: the huge ones are sparse). Last,
# run_parallel.sh acts, of what is named with its job's token, only on its user's own files and
# folders: another user's leftovers, links and journal stay, in one line, and do not fail the job.
# Every command runs under a deadline (timeout) with default signal dispositions (env
# --default-signal). Needs root (for the two users) and setpriv. Usage: foreign_journals.sh [build]
# runner: sanitized (make test-sanitize runs it again on the sanitized build)
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh foreign_journals
build=${1:-build}
prog=$(realpath -- "$build/facegen" 2> /dev/null || echo "$build/facegen")
[ -x "$prog" ] || { echo "foreign_journals: $prog is missing (run make)"; exit 1; }
[ "$(id -u)" = 0 ] || skip_suite "needs root, to act as two other users"
command -v setpriv > /dev/null || skip_suite "setpriv is missing"
attacker=4242
victim=4243
for uid in $attacker $victim; do
  getent passwd $uid > /dev/null && skip_suite "uid $uid is in use here; the suite needs two unused ones"
done

work=$(mktemp -d /tmp/facegen-foreign.XXXXXX)
on_exit 'rm -rf "$work"'
chmod 711 "$work"  # the two users pass through to their folders
run_as() {  # run_as UID COMMAND...: COMMAND as that user (0: root), within 20 s
  local uid=$1
  shift
  if [ "$uid" = 0 ]; then
    timeout -s KILL 20 env --default-signal "$@"
  else
    timeout -s KILL 20 setpriv --reuid="$uid" --regid="$uid" --clear-groups env --default-signal "$@"
  fi
}

# The victim's own files elsewhere, that the attacker's links point to.
home=$work/home
mkdir -p "$home/folder"
echo "precious" > "$home/precious.txt"
echo "a png of the victim's" > "$home/folder/000000.png"
chown -R $victim:$victim "$home"

# entry KIND EXISTED INODE TEMP FINAL: one journal entry as facegen writes it (without its last newline).
entry() { printf '%s %s %s %s %s\n%s%s' "$1" "$2" "$3" "${#4}" "${#5}" "$4" "$5"; }
# journal TOKEN ENTRY...: a journal of those entries (its last newline is dropped by "$(...)": the
# planting puts it back).
journal() {
  local token=$1
  shift
  printf 'facegen commit journal 1\nstate P\ntoken %s\nentries %s\n' "$token" $#
  [ $# -eq 0 ] || printf '%s\n' "$@"
}
inode() { stat -c %i -- "$1"; }

# state PATH...: every entry's kind, owner, mode, size and link target, and the sha256 of each
# regular file under 2 MiB (a sparse 4 GiB file by its size alone); nothing is opened but those.
state() {
  find "$@" -printf '%p %y %U %G %m %s %l\n' | LC_ALL=C sort
  find "$@" -type f -size -2M -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
}

# plant DIR RUNNER: the victim's files in DIR, the attacker's journals and links, and journals of
# RUNNER's own that facegen did not write; prints "NAME<TAB>WHY" for each journal planted.
plant() {
  local dir=$1 runner=$2 i
  # The victim's files in the folder: what the attacker's journals name.
  echo "notes" > "$dir/notes.txt"
  mkdir -p "$dir/photos" "$dir/album"
  for i in 000000 000001; do echo "photo $i" > "$dir/photos/$i.png"; echo "album $i" > "$dir/album/$i.png"; done
  chown -R $victim:$victim "$dir/notes.txt" "$dir/photos" "$dir/album"
  local notes photos
  notes=$(inode "$dir/notes.txt")
  photos=$(inode "$dir/photos")
  # The attacker's: a folder posing as a new PNG folder, links to the victim's files and folders, and
  # journals. Atk001 would be rolled back (an output of it is gone): unlinking notes.txt and removing
  # photos/ recursively; Atk002 rolled forward: exchanging album/ with the attacker's folder, then
  # removing album/ recursively; Atk008 names the attacker's links by the inodes of their targets.
  run_as $attacker bash -c '
    cd "$1" && mkdir album.tmp-eeeeee && echo mine > album.tmp-eeeeee/000000.png &&
      ln -s "$2/precious.txt" linked.txt && ln -s "$2/folder" linked' - "$dir" "$home" || return 1
  run_as $attacker bash -c '
    cd "$1" || exit 1
    umask 077
    printf "%s\n" "$3" > .facegen-commit-Atk001
    printf "%s\n" "$4" > .facegen-commit-Atk002
    ln -s "$2/precious.txt" .facegen-commit-Atk003
    ln -s "$2/folder" .facegen-commit-Atk004
    mkfifo .facegen-commit-Atk005
    truncate -s 4G .facegen-commit-Atk006
    mkdir .facegen-commit-Atk007 && echo kept > .facegen-commit-Atk007/inside
    printf "%s\n" "$5" > .facegen-commit-Atk008' - "$dir" "$home" \
    "$(journal Atk001 "$(entry F 0 "$notes" notes.txt.tmp-aaaaaa notes.txt)" \
                      "$(entry D 0 "$photos" photos.tmp-bbbbbb photos)" \
                      "$(entry F 0 12345 gone.txt.tmp-cccccc gone.txt)")" \
    "$(journal Atk002 "$(entry D 1 "$(inode "$dir/album.tmp-eeeeee")" album.tmp-eeeeee album)")" \
    "$(journal Atk008 "$(entry F 0 "$(inode "$home/precious.txt")" linked.txt.tmp-dddddd linked.txt)" \
                      "$(entry D 0 "$(inode "$home/folder")" linked.tmp-ffffff linked)")" || return 1
  local theirs="it belongs to uid $attacker, and facegen runs as uid $runner"
  printf '%s\t%s\n' .facegen-commit-Atk001 "$theirs" .facegen-commit-Atk002 "$theirs" \
    .facegen-commit-Atk003 "it is a symbolic link" .facegen-commit-Atk004 "it is a symbolic link" \
    .facegen-commit-Atk005 "it is a FIFO" .facegen-commit-Atk006 "$theirs" \
    .facegen-commit-Atk007 "it is a folder" .facegen-commit-Atk008 "$theirs"
  # The runner's own, not as facegen writes them.
  run_as "$runner" bash -c '
    cd "$1" || exit 1
    umask 077
    printf "%s\n" "$2" > .facegen-commit-Own001
    printf "%s\n" "$3" > .facegen-commit-Own002 && chmod 664 .facegen-commit-Own002
    printf "%s\n" "$4" > .facegen-commit-Own003
    truncate -s 4G .facegen-commit-Own004
    mkfifo .facegen-commit-Own005
    printf "%s\n" "$5" > .facegen-commit-Own006
    printf "%s\n" "$6" > .facegen-commit-Own007' - "$dir" \
    "$(journal Own001 "$(entry F 0 "$notes" notes.txt.tmp-aaaaaa ../notes.txt)")" \
    "$(journal Own002 "$(entry F 0 "$notes" notes.txt.tmp-aaaaaa notes.txt)" "$(entry F 0 1 g.tmp-cccccc g)")" \
    "$(journal Own003)" \
    "$(journal Own006 "$(entry D 0 "$photos" photos photos)")" \
    "$(journal Own007 "$(entry F 0 "$notes" notes.txt.tmp-aaaaaa notes.txt)" "$(entry F 0 1 g.tmp-cccccc g)")
x" || return 1
  printf '%s\t%s\n' \
    .facegen-commit-Own001 "entry 1 of 1 names the output ../notes.txt, not a name facegen gives an output in its folder" \
    .facegen-commit-Own002 "its mode 0664 lets its group or others write it" \
    .facegen-commit-Own003 "it records no output" \
    .facegen-commit-Own004 "it is 4,294,967,296 bytes, more than the 1,073,741,824 of the largest journal" \
    .facegen-commit-Own005 "it is a FIFO" \
    .facegen-commit-Own006 "entry 1 of 1 names a temporary that is not photos.tmp-XXXXXX" \
    .facegen-commit-Own007 "it goes on after its last entry"
}

# One folder, one runner: its outputs written first (by that user), then the planting, then a run
# over its outputs and --finish-commit on each journal.
check_folder() {  # check_folder NAME MODE RUNNER
  local name=$1 mode=$2 runner=$3 dir=$work/$1-$3 label got before lines expected journal why
  label="$name folder (mode $mode), facegen as uid $runner"
  mkdir -p "$dir"
  chown $victim:$victim "$dir"
  chmod "$mode" "$dir"
  local run=("$prog" --device synthetic --random 4 --output "$dir/out")
  if ! run_as "$runner" "${run[@]}" -q 2> "$work/stderr"; then
    fail "$label" "the first run failed: $(head -c 300 "$work/stderr")"
    return
  fi
  plant "$dir" "$runner" > "$work/planted" || { fail "$label" "planting failed"; return; }
  before=$(state "$dir" "$home")

  run_as "$runner" "${run[@]}" > /dev/null 2> "$work/stderr"
  got=$?
  expected=$(while IFS=$'\t' read -r journal why; do
    echo "facegen: left alone: $dir/$journal is not a commit journal of this user's facegen ($why)"
  done < "$work/planted" | LC_ALL=C sort)
  lines=$(LC_ALL=C sort "$work/stderr")
  if [ $got != 0 ]; then
    fail "$label: a run" "status $got: $(head -c 400 "$work/stderr")"
  elif [ "$lines" != "$expected" ]; then
    fail "$label: a run" "not one notice per planted journal: $(diff <(echo "$expected") <(echo "$lines") | head -c 600)"
  elif [ "$(state "$dir" "$home")" != "$before" ]; then
    fail "$label: a run" "a file changed: $(diff <(echo "$before") <(state "$dir" "$home") | head -c 600)"
  else
    pass "$label: a run leaves the $(wc -l < "$work/planted") planted journals alone, one notice each"
  fi

  local refused=0 wrong=
  while IFS=$'\t' read -r journal why; do
    run_as "$runner" "$prog" --finish-commit "$dir/$journal" > /dev/null 2> "$work/stderr"
    got=$?
    if [ $got != 1 ] ||
       [ "$(cat "$work/stderr")" != "facegen: error: $dir/$journal is not a commit journal of this user's facegen ($why); nothing was changed" ]; then
      wrong="$journal: status $got: $(head -c 300 "$work/stderr")"
      break
    elif [ "$(state "$dir" "$home")" != "$before" ]; then
      wrong="$journal: a file changed: $(diff <(echo "$before") <(state "$dir" "$home") | head -c 600)"
      break
    fi
    refused=$((refused + 1))
  done < "$work/planted"
  if [ -n "$wrong" ]; then
    fail "$label: --finish-commit" "$wrong"
  else
    pass "$label: --finish-commit refuses each of the $refused in one line, exit 1, nothing changed"
  fi
}

check_folder victims 777 0
check_folder victims 777 $victim
check_folder sticky 1777 0
check_folder sticky 1777 $victim

# run_parallel.sh: of what is named with its job's token, only its user's own files and folders are
# acted on. A stand-in for facegen, as the job's one rank, leaves its own temporary file and folder
# and, as another user could in a shared folder (the token shows in the temporaries' names while the
# job runs), that user's file, folder, links and journal named with the token; then fails (exit 1),
# or succeeds (exit 0: the foreign journal must not turn the job into a failure). Its
# --finish-commit is facegen's.
parallel_job() {  # parallel_job STATUS
  local want=$1 dir=$work/parallel-$1 stand_in=$work/stand-in-$1 got left want_left home_before
  local label="run_parallel.sh after a job of status $want"
  mkdir -p "$dir"
  chmod 1777 "$dir"
  cat > "$stand_in" << EOF
#!/usr/bin/env bash
[ "\$1" = --finish-commit ] && exec "$prog" "\$@"
out=$dir/out
tag=\$FACEGEN_TEMP_TAG
echo "own" > "\$out.txt.tmp-\$tag-Own001"
mkdir "\$out.tmp-\$tag-Own002" && echo "own" > "\$out.tmp-\$tag-Own002/000000.png"
echo "theirs" > "\$out.bmp.tmp-\$tag-Atk001"
mkdir "\$out.tmp-\$tag-Atk002" && echo "theirs" > "\$out.tmp-\$tag-Atk002/000000.png"
ln -s "$home/folder" "\$out.npy.tmp-\$tag-Atk003"
ln -s "$home/precious.txt" "$dir/x.tmp-\$tag-Atk004"
printf 'facegen commit journal 1\nstate P\ntoken %s\nentries 1\nD 0 %s 17 6\nphotos.tmp-bbbbbbphotos\n' "\$tag-Atk005" \
  "\$(stat -c %i "$home/folder")" > "$dir/.facegen-commit-\$tag-Atk005"
chmod 600 "$dir/.facegen-commit-\$tag-Atk005"
chown -h $attacker:$attacker "\$out".*tmp-"\$tag"-Atk* "$dir"/x.tmp-"\$tag"-Atk004 "\$out.tmp-\$tag-Atk002/000000.png" \
  "$dir/.facegen-commit-\$tag-Atk005"
exit $want
EOF
  chmod 755 "$stand_in"
  home_before=$(state "$home")
  timeout -s KILL 60 env --default-signal ./run_parallel.sh --program "$stand_in" --random 4 --ranks-per-node 1 \
    --output "$dir/out" > /dev/null 2> "$work/stderr"
  got=$?
  left=$(cd "$dir" && ls -A | LC_ALL=C sort | sed -E 's/rp[0-9]+h[0-9 ]+r[0-9]+/TAG/' | tr '\n' ' ')
  want_left=".facegen-commit-TAG-Atk005 out.bmp.tmp-TAG-Atk001 out.npy.tmp-TAG-Atk003 out.tmp-TAG-Atk002 x.tmp-TAG-Atk004 "
  # A job that succeeded leaves its temporaries to facegen (here, to the stand-in): none is removed.
  [ "$want" = 0 ] && want_left=".facegen-commit-TAG-Atk005 out.bmp.tmp-TAG-Atk001 out.npy.tmp-TAG-Atk003 out.tmp-TAG-Atk002 out.tmp-TAG-Own002 out.txt.tmp-TAG-Own001 x.tmp-TAG-Atk004 "
  if [ $got != "$want" ]; then
    fail "$label" "status $got: $(head -c 400 "$work/stderr")"
  elif [ "$left" != "$want_left" ] || [ "$(cat "$dir"/out.tmp-*-Atk002/000000.png)" != theirs ]; then
    fail "$label" "left: $left; stderr: $(head -c 400 "$work/stderr")"
  elif [ "$(state "$home")" != "$home_before" ]; then
    fail "$label" "the victim's files changed"
  elif ! grep -q "^run_parallel: left alone, not this user's own files or folders: .*\.facegen-commit-.*-Atk005" "$work/stderr" ||
       grep -q "is not a commit journal" "$work/stderr" ||
       { [ "$want" != 0 ] && ! grep -q "^run_parallel: removed temporary files: " "$work/stderr"; }; then
    fail "$label" "missing or unexpected lines: $(head -c 600 "$work/stderr")"
  elif [ "$want" = 0 ]; then
    pass "$label: another user's journal named with its token left alone, in one line, and the job still succeeds"
  else
    pass "$label: its own 2 temporaries removed; another user's file, folder, links and journal left, in one line"
  fi
}
if command -v mpirun > /dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  parallel_job 1
  parallel_job 0
else
  skip "run_parallel.sh's leftovers: mpirun is missing"
fi

suite_end --bare --skipped
