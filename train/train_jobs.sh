#!/usr/bin/env bash
# train_jobs.sh: runs several train_dcgan.py trainings side by side on one GPU and packs what comes
# back into few files of at most 16 MiB under OUT_DIR (a device call returns at most 8 files):
#   NAME.log                      each training's log
#   NAME.bin.part00, .part01      each network.bin split in two (join with cat)
#   NAME.netG.pth                 each tutorial-architecture state_dict (14.3 MB at ngf 64)
#   results.tar                   NAME/{samples.png,interpolation.png,metrics.json}
#
#   train/train_jobs.sh OUT_DIR MINUTES DATA_DIR "NAME ARGS..." ["NAME ARGS..." ...]
# e.g. train/train_jobs.sh out 6.5 .deps/data "fashion --data fashion" "emoji --data emoji --amp 1"
# DATA_DIR holds fashion-mnist/, emoji64/ and faces/ (train/make_faces.py); each job gets the --data-dir of
# its --data. Jobs share the GPU because one alone leaves it mostly idle: the models are small, so a step
# is bound by kernel launches more than by arithmetic. PYTHON picks the interpreter (default python3).
set -u
here=$(cd "$(dirname "$0")" && pwd)
usage='usage: train_jobs.sh OUT_DIR MINUTES DATA_DIR "NAME ARGS..." ...'
out=${1:?$usage}; minutes=${2:?$usage}; data=${3:?$usage}
shift 3
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
py=${PYTHON:-python3}
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
mkdir -p "$out"
nvidia-smi -L 2>/dev/null
"$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'

names=(); pids=()
for spec in "$@"; do
  read -r -a words <<<"$spec"
  name=${words[0]}; args=("${words[@]:1}")
  kind=""
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do [ "${args[i]}" = --data ] && kind=${args[i + 1]}; done
  case "$kind" in
    fashion) dir=$data/fashion-mnist ;;
    emoji) dir=$data/emoji64 ;;
    faces) dir=$data/faces ;;
    *) echo "job '$spec' needs --data fashion|emoji|faces" >&2; exit 2 ;;
  esac
  "$py" "$here/train_dcgan.py" --data-dir "$dir" --minutes "$minutes" --out "$work/$name" "${args[@]}" \
    >"$out/$name.log" 2>&1 &
  names+=("$name"); pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[i]}"; rc=$?
  echo "${names[i]}: exit $rc"
  [ "$rc" -eq 0 ] || status=1
done

for name in "${names[@]}"; do
  if [ -f "$work/$name/network.bin" ]; then
    sha256sum "$work/$name/network.bin"
    split -b 12M -d "$work/$name/network.bin" "$out/$name.bin.part"
  fi
  if [ -f "$work/$name/netG.pth" ]; then
    sha256sum "$work/$name/netG.pth"
    cp "$work/$name/netG.pth" "$out/$name.netG.pth"
  fi
done
(cd "$work" && tar -cf "$out/results.tar" $(ls -d */*.png */metrics.json 2>/dev/null))
for name in "${names[@]}"; do echo "== $name.log (tail)"; tail -n 14 "$out/$name.log" | cut -c1-200; done
rm -rf "$work"
exit "$status"
