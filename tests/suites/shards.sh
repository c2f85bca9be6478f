#!/usr/bin/env bash
# shards.sh: the sharded outputs as their readers see them.
#
#   tar        Python's tarfile reads every shard PREFIX-000000.tar, ...; WebDataset's layout holds: keys
#              of 9 digits, KEY.png then KEY.json side by side, keys in index order across the shards,
#              shard k holding images [k S, (k+1) S); each PNG is the png folder's file byte for byte;
#              each json names index, random_seed, model and precision; with --seeds the keys are the
#              seeds (seed0005); the model is its file's name and XXH3-128 (the resume manifest's), so
#              a copy of the model elsewhere makes the same shards and a changed byte another digest
#   npy-u8     np.load gives (N, 64, 64, 3) uint8 equal to the BMP mosaic's pixels, whole and in shards
#   flags      --shard-images without a sharded format, 0 or 2^31: exit 1, one sentence, nothing written
#   stale      an earlier run's shards are named in the summary as left, and kept
#   O_DIRECT   tar, npy and npy-u8 written past the page cache and through it: the same bytes (1
#              process and 3 ranks; a disk's file system and tmpfs)
#   skipped    FACEGEN_PROFILE_SKIP=writes: every file made, nothing written, one warning; =files: no
#              PNG made
#   SIGKILL    a job killed while it writes its shards (the second shard's temporary exists) leaves no
#              shard under a final name
# Every run starts with default signal dispositions and has a deadline. Usage: shards.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh shards
build=${1:-build}
prog=$build/facegen
[ -x "$prog" ] || { echo "shards: $prog is missing (run make)"; exit 1; }
py=/usr/bin/python3
$py -c "import numpy" 2> /dev/null || skip_suite "$py lacks numpy"
work=$(mktemp -d /tmp/facegen-shards.XXXXXX)
on_exit 'rm -rf "$work"'

run() {  # run ARGS...: the program, 120 s at most, default signals; stdout and stderr kept
  env --default-signal timeout 120 "$prog" --device synthetic "$@" > "$work/stdout" 2> "$work/stderr"
}

echo "shards as their readers see them:"
# --- tar and npy-u8 read back -----------------------------------------------------------------------
n=23
if ! run --random $n --seed 3 --output "$work/r" --formats tar,npy-u8,png,bmp --shard-images 5 -q ||
   ! run --random $n --seed 3 --output "$work/w" --formats npy-u8 -q; then
  fail "tar, npy-u8, png and bmp of $n images" "exit status: $(head -c 300 "$work/stderr")"
else
  verdict=$($py - "$work" $n 5 <<'PY' 2>&1
import glob, json, os, re, sys, tarfile
import numpy as np
work, n, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
problems = []
shards = sorted(glob.glob(f"{work}/r-*.tar"))
want = [f"{work}/r-{k:06d}.tar" for k in range((n + s - 1) // s)]
if shards != want: problems.append(f"shards {shards}")
keys = []
for k, path in enumerate(shards):
    with tarfile.open(path) as archive:
        members = archive.getmembers()
        for m in members:
            if not m.isfile() or m.mode != 0o644 or m.uid or m.gid or m.mtime or m.uname or m.gname:
                problems.append(f"{m.name}: type, mode, owner or time")
        names = [m.name for m in members]
        for i in range(0, len(names), 2):
            key = names[i].split(".", 1)[0]
            if not re.fullmatch(r"\d{9}", key) or names[i:i + 2] != [key + ".png", key + ".json"]:
                problems.append(f"{path}: members {names[i:i + 2]}")
                continue
            keys.append(int(key))
            png = archive.extractfile(names[i]).read()
            if png != open(f"{work}/r/{int(key):06d}.png", "rb").read(): problems.append(f"{key}.png differs")
            meta = json.loads(archive.extractfile(names[i + 1]).read())
            if meta.get("index") != int(key) or meta.get("random_seed") != 3 or "model" not in meta or \
               meta.get("precision") != "fp32":
                problems.append(f"{key}.json: {meta}")
        if keys[-(len(names) // 2):] != list(range(k * s, min((k + 1) * s, n))): problems.append(f"{path}: keys")
if keys != list(range(n)): problems.append(f"keys {keys}")
# The BMP mosaic (5 x 5 tiles, BGR, rows bottom-up) as (N, 64, 64, 3) RGB.
bmp = open(f"{work}/r.bmp", "rb").read()
side = 5
rows = np.frombuffer(bmp, np.uint8, offset=54).reshape(side * 64, -1)[::-1, :side * 64 * 3]
tiles = rows.reshape(side, 64, side, 64, 3)[..., ::-1].transpose(0, 2, 1, 3, 4).reshape(-1, 64, 64, 3)[:n]
parts = [np.load(p) for p in sorted(glob.glob(f"{work}/r-*.u8.npy"))]
if [p.shape for p in parts] != [(5, 64, 64, 3)] * 4 + [(3, 64, 64, 3)] or any(p.dtype != np.uint8 for p in parts):
    problems.append(f"u8 shards {[(p.shape, p.dtype) for p in parts]}")
elif not np.array_equal(np.concatenate(parts), tiles): problems.append("u8 shards differ from the BMP's pixels")
whole = np.load(f"{work}/w.u8.npy")
if whole.shape != (n, 64, 64, 3) or not np.array_equal(whole, tiles): problems.append("w.u8.npy differs from the BMP")
print("; ".join(problems[:4]) if problems else "ok")
PY
)
  [ "$verdict" = ok ] && pass "tarfile reads $((($n + 4) / 5)) shards of 5; WebDataset layout, PNGs, json; npy-u8 equal to the BMP" ||
    fail "tar and npy-u8 read back" "$verdict"
fi

# --- --shard-images refused ---------------------------------------------------------------------------
for flags in "--formats txt,bmp --shard-images 5" "--formats tar --shard-images 0" "--formats npy --shard-images 2147483648" \
             "--formats npy-u8 --shard-images x"; do
  mkdir -p "$work/refused"
  run --random 3 --output "$work/refused/r" $flags
  got=$?
  if [ $got -ne 1 ] || [ "$(wc -l < "$work/stderr")" -ne 1 ] || ! grep -q -- "--shard-images" "$work/stderr" ||
     [ -n "$(ls -A "$work/refused")" ]; then
    fail "$flags" "exit $got, expected 1 and one line naming --shard-images, nothing written: $(head -c 300 "$work/stderr")"
  else
    pass "$flags: $(cat "$work/stderr")"
  fi
  rm -rf "$work/refused"
done

# --- --seeds: each sample is keyed by its seed and its json names it ----------------------------------
mkdir -p "$work/seeds"
if run --seeds 5,7,100-101,12345 --output "$work/seeds/s" --formats tar --shard-images 3 -q; then
  seeds=$($py -c 'import json, sys, tarfile
out = []
for shard in sys.argv[1:]:
    with tarfile.open(shard) as t:
        out += [m.name.split(".")[0] + ":" + str(json.load(t.extractfile(m))["seed"]) for m in t.getmembers() if m.name.endswith(".json")]
        out += ["png-" + m.name for m in t.getmembers() if m.name.endswith(".png") and m.name.split(".")[0] + ".json" not in t.getnames()]
print(",".join(out))' "$work/seeds/s-000000.tar" "$work/seeds/s-000001.tar" 2>&1)
  [ "$seeds" = "seed0005:5,seed0007:7,seed0100:100,seed0101:101,seed12345:12345" ] &&
    pass "--seeds 5,7,100-101,12345 into tar: each sample keyed seedNNNN by its seed, its json naming it" ||
    fail "--seeds into tar" "keys and seeds in the json: $seeds"
else
  fail "--seeds into tar" "exit status: $(head -c 300 "$work/stderr")"
fi

# --- the model in each sample's json: its file's name and XXH3-128, not where it was installed ---------
model=$build/random-network.bin
mkdir -p "$work/installed/elsewhere" "$work/model"
cp "$model" "$work/installed/elsewhere/random-network.bin"
cp "$model" "$work/changed.bin"
printf '\x01' | dd of="$work/changed.bin" bs=1 seek=1000 conv=notrunc status=none  # a low bit of one weight
cpu() { env --default-signal timeout 120 "$prog" --device cpu --threads 1 --random 4 --formats tar --quiet "$@"; }
if cpu --model "$model" --output "$work/model/a" --resume && cpu --model "$work/installed/elsewhere/random-network.bin" \
     --output "$work/model/b" && cpu --model "$work/changed.bin" --output "$work/model/c"; then
  verdict=$($py - "$work/model" "$(basename "$model")" <<'PY' 2>&1
import json, sys, tarfile
work, name = sys.argv[1], sys.argv[2]
def metas(prefix):
    with tarfile.open(f"{work}/{prefix}-000000.tar") as t:
        return [json.load(t.extractfile(m)) for m in t.getmembers() if m.name.endswith(".json")]
a, c = metas("a"), metas("c")
recorded = [l.split(" ", 2)[2].split()[-1] for l in open(f"{work}/a.facegen-resume") if l.startswith("job model-xxh3 ")][0]
problems = []
if any(m["model"] != name or m["model_xxh3"] != recorded for m in a): problems.append(f"a: {a[0]} against {recorded}")
if open(f"{work}/a-000000.tar", "rb").read() != open(f"{work}/b-000000.tar", "rb").read(): problems.append("a copy elsewhere: other bytes")
if c[0]["model"] != "changed.bin" or c[0]["model_xxh3"] == recorded or len(c[0]["model_xxh3"]) != 32: problems.append(f"c: {c[0]}")
print("; ".join(problems) if problems else "ok")
PY
)
  [ "$verdict" = ok ] &&
    pass "each sample's json names the model file's name and XXH3-128 (the manifest's); a copy elsewhere makes the same shard, a changed byte another digest" ||
    fail "the model in the json" "$verdict"
else
  fail "the model in the json" "a run failed: $(head -c 300 "$work/stderr")"
fi

# --- an earlier run's shards: named as left, kept ------------------------------------------------------
mkdir -p "$work/stale"
run --random 7 --output "$work/stale/r" --formats tar,npy --shard-images 2 -q  # 4 shards of each
before=$(cd "$work/stale" && ls | tr '\n' ' ')
run --random 3 --output "$work/stale/r" --formats tar --shard-images 2 --summary-json "$work/s.json"
got=$?
left=$($py -c 'import json, os, sys; print(" ".join(os.path.basename(p) for p in json.load(open(sys.argv[1]))["stale_files"]))' \
       "$work/s.json" 2>&1)
after=$(cd "$work/stale" && ls | tr '\n' ' ')
if [ $got -eq 0 ] && [ "$before" = "$after" ] &&
   [ "$left" = "r-000000.npy r-000001.npy r-000002.npy r-000002.tar r-000003.npy r-000003.tar" ]; then
  pass "an earlier run's shards beyond this run's and other formats: named as left, all kept"
else
  fail "an earlier run's shards" "exit $got; before: $before; after: $after; $left"
fi

# --- past the page cache (O_DIRECT) or through it: the same bytes ------------------------------------
# tar, npy and npy-u8 shards of odd sizes and an unsplit npy, written with FACEGEN_DIRECT_WRITES=on and
# =off (engine/direct_write.hpp), in this suite's folder (a disk's file system here, or not) and in
# /dev/shm (tmpfs: no O_DIRECT, the page cache either way); one process and, where mpirun is, 3 ranks.
bench_write=$(dirname "$prog")/facegen-bench-write
direct_here=unknown
[ -x "$bench_write" ] && { "$bench_write" "$work" --mib 8 --writers 1 --ways files-direct | grep -q 'not taken' &&
                           direct_here=no || direct_here=yes; }
problem=
for dir in "$work/direct" /dev/shm/facegen-shards-$$; do
  for flags in "--formats tar,npy-u8 --shard-images 777" "--formats npy --shard-images 333" "--formats npy,tar"; do
    rm -rf "$dir" && mkdir -p "$dir/on" "$dir/off"
    read -r -a args <<< "$flags"
    FACEGEN_DIRECT_WRITES=on run --random 2501 --seed 4 --output "$dir/on/r" "${args[@]}" -q ||
      problem="$problem; on, $flags: $(head -c 200 "$work/stderr")"
    FACEGEN_DIRECT_WRITES=off run --random 2501 --seed 4 --output "$dir/off/r" "${args[@]}" -q ||
      problem="$problem; off, $flags: $(head -c 200 "$work/stderr")"
    diff -r "$dir/on" "$dir/off" > /dev/null || problem="$problem; $flags in $dir: $(diff -rq "$dir/on" "$dir/off" | head -2)"
    if command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi && [ "$flags" = "--formats tar,npy-u8 --shard-images 777" ]; then
      rm -rf "$dir/on" && mkdir -p "$dir/on"
      FACEGEN_DIRECT_WRITES=on OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TMPDIR=$work env --default-signal \
        timeout 120 mpirun -np 3 --oversubscribe "$prog" --device synthetic --all-ranks --random 2501 --seed 4 \
        --output "$dir/on/r" "${args[@]}" -q > /dev/null 2> "$work/stderr" || problem="$problem; 3 ranks: $(head -c 200 "$work/stderr")"
      diff -r "$dir/on" "$dir/off" > /dev/null || problem="$problem; 3 ranks, $flags in $dir: $(diff -rq "$dir/on" "$dir/off" | head -2)"
    fi
  done
  rm -rf "$dir"
done
if [ -z "$problem" ]; then
  pass "tar, npy and npy-u8 shards of odd sizes, with and without O_DIRECT (taken in $work: $direct_here; never in /dev/shm): the same bytes"
else
  fail "with and without O_DIRECT" "${problem#; }"
fi

# --- a profile's runs without the writes (FACEGEN_PROFILE_SKIP, bench/job_profile.sh) ----------------
mkdir -p "$work/skip"
FACEGEN_PROFILE_SKIP=writes run --random 30 --output "$work/skip/r" --formats tar,npy-u8,png --shard-images 20
got=$?
warned=$(grep -c "^facegen: warning: FACEGEN_PROFILE_SKIP=writes: the outputs' bytes are not written" "$work/stderr")
sizes=$(cd "$work/skip" && stat -c '%n %s' r-000000.tar r-000001.tar r-000000.u8.npy r/000000.png | paste -sd' ')
zeros=$(head -c 245888 "$work/skip/r-000000.u8.npy" | tr -d '\0' | wc -c)
FACEGEN_PROFILE_SKIP=files run --random 30 --output "$work/skip/f" --formats png
if [ $got -eq 0 ] && [ "$warned" = 1 ] && [ "$sizes" = "r-000000.tar 0 r-000001.tar 0 r-000000.u8.npy 245888 r/000000.png 0" ] &&
   [ "$zeros" = 0 ] && [ -d "$work/skip/f" ] && [ -z "$(ls -A "$work/skip/f")" ]; then
  pass "FACEGEN_PROFILE_SKIP=writes: one warning, every file made and nothing written; =files: no PNG made"
else
  fail "FACEGEN_PROFILE_SKIP" "exit $got, $warned warnings, sizes: $sizes, $zeros bytes not zero, f: $(ls -A "$work/skip/f" | head -3)"
fi

# --- SIGKILL while shards are written -----------------------------------------------------------------
mkdir -p "$work/kill"
env --default-signal "$prog" --device synthetic --random 200000 --output "$work/kill/r" --formats tar,npy-u8 \
  --shard-images 500 -q > /dev/null 2>&1 &
pid=$!
tries=0  # the event: shard 1's temporary exists, so shard 0 is complete (and closed) in its temporary
until compgen -G "$work/kill/r-000001.tar.tmp-*" > /dev/null || [ $tries -ge 600 ]; do sleep 0.1; tries=$((tries + 1)); done
{
  kill -KILL $pid
  for _ in $(seq 100); do kill -0 $pid || break; sleep 0.1; done  # a deadline for the wait below
  wait $pid
} 2> /dev/null
got=$?
finals=$(cd "$work/kill" && ls | grep -v '\.tmp-' | tr '\n' ' ')
if [ $tries -ge 600 ]; then
  fail "SIGKILL mid-shard" "shard 1's temporary never appeared: $(ls "$work/kill" | head -5 | tr '\n' ' ')"
elif [ $got -ne 137 ] || [ -n "$finals" ]; then
  fail "SIGKILL mid-shard" "status $got; under final names: $finals"
else
  pass "SIGKILL mid-shard: no shard under a final name (temporaries left: $(ls "$work/kill" | grep -c '\.tmp-'))"
fi

suite_end
