#!/usr/bin/env bash
# train_both.sh: trains the Fashion-MNIST and the emoji generator side by side on one GPU and packs what
# comes back into at most 7 files of at most 12 MiB under OUT_DIR:
#   fashion.log, emoji.log                 the training logs
#   fashion.bin.part00/01, emoji.bin.part00/01   each network.bin split in two (join with cat)
#   results.tar                            {fashion,emoji}/{samples.png,interpolation.png,metrics.json}
#
#   train/train_both.sh OUT_DIR [MINUTES] [DATA_DIR [EXTRA train_dcgan.py ARGUMENTS...]]
# DATA_DIR holds fashion-mnist/ and emoji64/ (default: .deps/data of the project root). Two processes
# share the GPU because each alone leaves it mostly idle: the models are small, so a step is bound by
# kernel launches rather than arithmetic.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: train_both.sh OUT_DIR [MINUTES] [DATA_DIR]}
minutes=${2:-6.5}
data=${3:-$here/../../.deps/data}
shift $(( $# < 3 ? $# : 3 ))
work=$(mktemp -d)
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
mkdir -p "$out"
nvidia-smi -L 2>/dev/null
"$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)'

"$py" "$here/train_dcgan.py" --data fashion --data-dir "$data/fashion-mnist" --minutes "$minutes" \
  --out "$work/fashion" "$@" >"$out/fashion.log" 2>&1 &
fashion_pid=$!
"$py" "$here/train_dcgan.py" --data emoji --data-dir "$data/emoji64" --minutes "$minutes" \
  --real-label 0.9 --out "$work/emoji" "$@" >"$out/emoji.log" 2>&1 &
emoji_pid=$!
wait "$fashion_pid"; fashion_rc=$?
wait "$emoji_pid"; emoji_rc=$?

for d in fashion emoji; do
  if [ -f "$work/$d/network.bin" ]; then
    sha256sum "$work/$d/network.bin"
    split -b 12M -d "$work/$d/network.bin" "$out/$d.bin.part"
  fi
done
(cd "$work" && tar -cf "$out/results.tar" $(ls -d */*.png */metrics.json 2>/dev/null))
for d in fashion emoji; do echo "== $d.log (tail)"; tail -n 12 "$out/$d.log"; done
echo "fashion rc $fashion_rc, emoji rc $emoji_rc"
rm -rf "$work"
[ "$fashion_rc" -eq 0 ] && [ "$emoji_rc" -eq 0 ]
