#!/usr/bin/env bash
# progress_summary.sh: what a person and a script see of a run: the progress display and the summary.
#
# On a pseudo-terminal (script from bsdutils) the bar is redrawn in place several times within one
# chunk (it follows time, not chunks) and cleared before the summary; --quiet prints nothing. In a
# pipe, --progress-every S gives one line every S seconds and a short run at the default (10 s) none.
# --summary-json is checked against the run: counts, stages, and every file with its size on disk; a
# file per shard and mosaic with its XXH3 (a shard's as --resume's manifest records it), each output's
# pattern expanded by bash to its files, by seed too; a failed run's JSON (to a file and to stdout,
# and with --resume the units its manifest records).
# The same under MPI (2 ranks through run_parallel.sh): rank 0's lines count the whole job's images,
# and its JSON has each rank's figures, every rank's shards, and a failing rank's line. CPU runs of 512 to 1,024 images on the tests' random model (long enough for several redraws at the CPU backend's speed).
# Usage: tests/suites/progress_summary.sh [build-dir]; exit 0 pass, 1 fail.
# runner: inside background_shell (make test runs it there, with SIGHUP, SIGINT and SIGQUIT ignored)
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh progress_summary
build=${1:-build}
prog=$build/facegen
model=$build/random-network.bin
[ -x "$prog" ] && [ -f "$model" ] || { echo "progress_summary: $prog or $model is missing (run make)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d /tmp/facegen-progress.XXXXXX)
on_exit 'rm -rf "$work"'

# check_json JSON PREFIX IMAGES RANKS: the summary agrees with the run and the files on disk.
check_json() {
  /usr/bin/python3 - "$@" <<'PY'
import json, os, sys
path, prefix, images, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = json.load(open(path))
def need(ok, what):
    if not ok:
        print(f"{what}: {json.dumps(s)[:400]}")
        sys.exit(1)
need(s["images"] == images, "images")
need(s["device"] == "cpu" and s["precision"] == "fp32", "device and precision")
need(s["ranks"] == ranks, "ranks")
need(s["program"]["version"] and s["program"]["commit"], "program")
need({"parse", "generate", "write"} <= set(s["stages"]), "stages")
for name, stage in s["stages"].items():
    need(stage["seconds"] >= 0, f"stage {name} seconds")
    if stage["seconds"] > 0:
        need(abs(stage["images_per_second"] * stage["seconds"] - images) < 1e-6 * images + 1e-6, f"stage {name} rate")
need(s["total"]["seconds"] >= s["stages"]["generate"]["seconds"], "total covers generation")
need(s["peak_memory_bytes"] > 10**6, "peak memory")
written = {f["path"]: f["bytes"] for f in s["files"]}
need(set(written) == {prefix + ".txt", prefix + ".bmp"}, "files")
for f, size in written.items():
    need(os.path.getsize(f) == size, f"size of {f}")
need(s["stages"]["write"]["bytes"] == sum(written.values()), "bytes written")
if ranks > 1:
    need(len(s["per_rank"]) == ranks and [r["rank"] for r in s["per_rank"]] == list(range(ranks)), "per_rank")
    need(sum(r["images"] for r in s["per_rank"]) == images, "per-rank images add up")
    need(all(r["host"] and r["peak_memory_bytes"] > 0 for r in s["per_rank"]), "per-rank host and memory")
    need("startup" not in s, "no start-up parts for an MPI job")
else:
    need("per_rank" not in s, "no per_rank for one process")
    parts = s["startup"]
    need(set(parts) == {"model_seconds", "backend_seconds"}, "start-up parts (--device cpu: no CUDA context)")
    need(all(v >= 0 for v in parts.values()), "start-up parts' seconds")
    need(s["load_seconds"] >= parts["model_seconds"] + parts["backend_seconds"] - 1e-6, "load covers the parts")
PY
}

echo "progress and summary:"
if command -v script > /dev/null; then
  timeout -s KILL 120 script -qec "$prog --device cpu --threads 1 --model $model --random 512 --output $work/tty --formats npy" /dev/null \
    > "$work/tty.out" 2>&1
  # Each redraw starts with "\r["; the counts drawn, in order.
  tr '\r' '\n' < "$work/tty.out" | grep -oE '^\[[# ]+\] [0-9]+/512 images' | grep -oE '[0-9]+/512' > "$work/counts"
  draws=$(wc -l < "$work/counts")
  inner=$(grep -cvE '^(0|512)/512$' "$work/counts")
  if [ "$draws" -ge 3 ] && [ "$inner" -ge 1 ] && grep -q $'\r\033\[K' "$work/tty.out" && grep -q '^total ' "$work/tty.out"; then
    pass "terminal: the bar moved $draws times within one chunk ($(paste -sd' ' "$work/counts")), cleared before the summary"
  else
    fail "terminal bar" "draws $draws, intermediate $inner: $(head -c 300 "$work/tty.out" | od -c | head -4)"
  fi
  # Ctrl-C while the bar is drawn: the line that says so replaces the bar rather than following it.
  # The run is interrupted once its output exists and the bar (redrawn every 0.2 s) has had 0.6 s.
  # (A background job of a shell script starts with SIGINT ignored: env --default-signal undoes that.)
  timeout -s KILL 120 script -qec "bash -c 'env --default-signal $prog --device cpu --threads 1 --model $model --random 100000 \
    --output $work/int --formats npy & pid=\$!; for i in \$(seq 600); do compgen -G \"$work/int.npy.tmp-*\" > /dev/null && break; \
    sleep 0.05; done; sleep 0.6; kill -INT \$pid; wait \$pid'" /dev/null > "$work/int.out" 2>&1
  if grep -q $'\r\033\[Kfacegen: interrupted (SIGINT); temporary files removed' "$work/int.out" &&
     tr '\r' '\n' < "$work/int.out" | grep -qE '^\[[# ]+\] [0-9]+/100000 images'; then
    pass "terminal, Ctrl-C while the bar is drawn: its line clears the bar"
  else
    fail "terminal, Ctrl-C" "$(tail -c 200 "$work/int.out" | od -c | tail -6)"
  fi
  timeout -s KILL 120 script -qec "$prog --quiet --device cpu --model $model --random 16 --output $work/tty --formats npy" /dev/null \
    > "$work/tty.out" 2>&1
  [ ! -s "$work/tty.out" ] && pass "terminal with --quiet: nothing at all" || fail "quiet" "$(head -c 200 "$work/tty.out")"
else
  fail "terminal" "script (bsdutils) is missing"
fi

"$prog" --device cpu --threads 1 --model "$model" --random 512 --output "$work/pipe" --progress-every 0.3 \
  --summary-json "$work/pipe.json" > "$work/stdout" 2> "$work/stderr"
lines=$(grep -c '^facegen: progress [0-9]*/512 images ([0-9]*%), [0-9]* images/s, ' "$work/stderr")
if [ "$lines" -ge 2 ] && [ "$(grep -cv '^facegen: progress' "$work/stderr")" = 0 ] && ! grep -q $'\r' "$work/stderr"; then
  pass "pipe, --progress-every 0.3: $lines plain lines, no bar"
else
  fail "pipe progress" "$(head -5 "$work/stderr")"
fi
if error=$(check_json "$work/pipe.json" "$work/pipe" 512 1); then
  pass "--summary-json: counts, stages and rates, every file with its size on disk"
else
  fail "--summary-json" "$error"
fi
if [ -z "$(ls "$work" | grep tmp-)" ] && grep -q "^wrote     $work/pipe.bmp" "$work/stdout"; then
  pass "--summary-json beside the human summary, no temporary file left"
else
  fail "summary files" "$(ls "$work")"
fi
"$prog" --device cpu --model "$model" --random 8 --output "$work/short" > /dev/null 2> "$work/stderr"
[ ! -s "$work/stderr" ] && pass "pipe, short run at the default 10 s: no progress line" || fail "short run" "$(cat "$work/stderr")"

# check_files JSON: every file the summary lists is on disk with its bytes; each output's pattern
# expands in bash to exactly its files (the shards and mosaics listed, the PNG folder's files on disk);
# each tar shard's XXH3-128 is the one a --resume run's manifest records for it (MANIFEST, if given).
check_files() {
  /usr/bin/python3 - "$@" <<'PY'
import json, os, subprocess, sys
s = json.load(open(sys.argv[1]))
manifest = sys.argv[2] if len(sys.argv) > 2 else ""
def need(ok, what):
    if not ok:
        print(f"{what}: {json.dumps(s)[-600:]}")
        sys.exit(1)
need(s["ok"] is True, "ok")
files = s["files"]
for f in files:
    need(os.path.isfile(f["path"]) and os.path.getsize(f["path"]) == f["bytes"], f"size of {f['path']}")
    need(len(f["xxh3"]) == 32 and all(c in "0123456789abcdef" for c in f["xxh3"]), f"xxh3 of {f['path']}")
need([o["format"] for o in s["outputs"]] == s["formats"], "formats")
for out in s["outputs"]:
    expanded = subprocess.run(["bash", "-c", "printf '%s\\n' " + out["pattern"]], capture_output=True, text=True).stdout.split()
    if out["format"] == "png":
        on_disk = sorted(os.path.join(out["folder"], n) for n in os.listdir(out["folder"]))
        need(sorted(expanded) == on_disk and out["files"] == len(on_disk), f"the png pattern {out['pattern']}")
        need(out["bytes"] == sum(os.path.getsize(p) for p in on_disk), "the png folder's bytes")
    else:
        listed = [f["path"] for f in files if f["format"] == out["format"]]
        need(expanded == listed and out["files"] == len(listed), f"the {out['format']} pattern {out['pattern']}: {expanded} {listed}")
        need(out["bytes"] == sum(f["bytes"] for f in files if f["format"] == out["format"]), f"{out['format']} bytes")
        need(sum(f["images"] for f in files if f["format"] == out["format"]) == out["images"] == s["images"], "images")
if manifest:
    units = {}
    for line in open(manifest):
        part = line.split()
        if part[0] == "unit" and part[1] == "tar":
            units[int(part[2])] = part[4]
    tars = [f for f in files if f["format"] == "tar"]
    need(len(tars) == len(units) and all(units[k] == f["xxh3"] for k, f in enumerate(tars)), f"xxh3 against {manifest}: {units}")
PY
}

# A job of shards, mosaics and a PNG folder; the shards' digests against a --resume run's manifest.
if "$prog" --device cpu --threads 1 --model "$model" --random 25 --formats tar,bmp,png --shard-images 10 --mosaic-tiles 2 \
     --output "$work/many" --summary-json "$work/many.json" -q &&
   "$prog" --device cpu --threads 1 --model "$model" --random 25 --formats tar --shard-images 10 --resume \
     --output "$work/resumed" -q && error=$(check_files "$work/many.json" "$work/resumed.facegen-resume"); then
  pass "--summary-json files: one entry per file on disk with its bytes, each shard's XXH3 as --resume records it; patterns expand to the files"
else
  fail "--summary-json files" "${error:-a run failed}"
fi
if "$prog" --device cpu --threads 1 --model "$model" --seeds 0-7,42,9998-10001 --formats png,tar --output "$work/seeds" \
     --summary-json - > "$work/seeds.json" && error=$(check_files "$work/seeds.json") &&
   grep -q '"pattern": ".*/seeds/{seed{0000..0007}.png,seed0042.png,seed{9998..9999}.png,seed{10000..10001}.png}"' "$work/seeds.json"; then
  pass "--seeds 0-7,42,9998-10001 --summary-json -: the PNG folder's pattern by seed expands to its files"
else
  fail "--summary-json by seed" "${error:-$(grep pattern "$work/seeds.json")}"
fi
# A failed run writes what went wrong and what it left: to a file, or to stdout with -.
printf '3\n%s 0.5x\n' "$(printf '0.1 %.0s' {1..99})" > "$work/bad.txt"
"$prog" --device cpu --model "$model" --input "$work/bad.txt" --output "$work/badrun" --summary-json "$work/bad.json" \
  > /dev/null 2> "$work/bad.err"
status=$?
"$prog" --device cpu --model "$model" --input "$work/bad.txt" --output "$work/badrun" --summary-json - > "$work/bad-stdout.json" 2> /dev/null
if [ $status = 1 ] && /usr/bin/python3 - "$work/bad.json" "$work/bad.err" "$work/bad-stdout.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
line = open(sys.argv[2]).read().strip()
assert s["ok"] is False and s["error"]["exit_status"] == 1, s
assert "facegen: error: " + s["error"]["message"] == line, (s["error"]["message"], line)
assert s["left"] == {"outputs_in_place": False, "resume": None} and s["formats"] == ["txt", "bmp"], s
assert json.load(open(sys.argv[3])) == s
PY
then
  pass "a failed run: its JSON holds the error as printed, status 1, nothing in place; the same on stdout with -"
else
  fail "a failed run's JSON" "status $status: $(cat "$work/bad.json" 2> /dev/null | head -c 300)"
fi
# With --resume: the manifest's finished units, as the manifest holds them.
/usr/bin/python3 - "$work/late.txt" <<'PY'
import random, sys
rng = random.Random(5)
rows = [" ".join(f"{rng.gauss(0, 1):.5f}" for _ in range(100)) for _ in range(40)]
rows[37] = rows[37].replace(" ", " nan ", 1)
open(sys.argv[1], "w").write("40\n" + "\n".join(rows) + "\n")
PY
"$prog" --device cpu --threads 1 --model "$model" --input "$work/late.txt" --formats tar --shard-images 4 --chunk 4 --resume \
  --output "$work/late" --summary-json "$work/late.json" > /dev/null 2>&1
status=$?
if [ $status = 1 ] && /usr/bin/python3 - "$work/late.json" "$work/late.facegen-resume" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
units = [l for l in open(sys.argv[2]) if l.startswith("unit ")]
r = s["left"]["resume"]
assert s["ok"] is False and r["manifest"].endswith("late.facegen-resume"), s
assert r["finished_units"] == len(units) and r["finished_bytes"] == sum(int(l.split()[3]) for l in units), (r, units)
PY
then
  pass "a failed --resume run: its JSON counts the units its manifest records ($(grep -c '^unit ' "$work/late.facegen-resume"))"
else
  fail "a failed --resume run's JSON" "status $status: $(head -c 400 "$work/late.json" 2> /dev/null)"
fi

if ! command -v mpirun > /dev/null || ! ldd "$prog" | grep -q libmpi; then
  echo "  skip  MPI progress and summary (no MPI here)"
elif timeout 120 ./run_parallel.sh --program "$prog" --model "$model" --random 1024 --output "$work/mpi" --ranks-per-node 2 \
       -- --device cpu --threads 1 --progress-every 0.3 --summary-json "$work/mpi.json" > "$work/stdout" 2> "$work/stderr"; then
  counts=$(grep -oE '^facegen: progress [0-9]+/1024' "$work/stderr" | grep -oE '[0-9]+/' | tr -d / | paste -sd' ')
  most=$(printf '%s\n' $counts | sort -n | tail -1)
  # Rank 0 generates 512 of the 1,024: a count above 512 includes rank 1's, which came through MPI.
  if [ -n "$most" ] && [ "$most" -gt 512 ]; then
    pass "MPI, 2 ranks: rank 0's lines count the whole job ($counts)"
  else
    fail "MPI progress" "counts: '$counts'; $(head -5 "$work/stderr")"
  fi
  if error=$(check_json "$work/mpi.json" "$work/mpi" 1024 2); then
    pass "MPI --summary-json: the job's figures and each rank's"
  else
    fail "MPI --summary-json" "$error"
  fi
  # Every rank's shards in rank 0's JSON; a failure's JSON names the failing rank.
  if timeout 120 ./run_parallel.sh --program "$prog" --model "$model" --random 40 --output "$work/mpitar" --ranks-per-node 2 \
       -- --device cpu --threads 1 --all-ranks --formats tar --shard-images 4 --summary-json "$work/mpitar.json" -q > /dev/null 2>&1 &&
     error=$(check_files "$work/mpitar.json") &&
     [ "$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["files"]))' "$work/mpitar.json")" = 10 ]; then
    pass "MPI, 2 ranks: the JSON lists all 10 shards, both ranks' files, each on disk with its bytes"
  else
    fail "MPI --summary-json files" "${error:-the job failed or not 10 files}"
  fi
  timeout 120 ./run_parallel.sh --program "$prog" --model "$model" --input "$work/late.txt" --output "$work/mpibad" --ranks-per-node 2 \
    -- --device cpu --threads 1 --all-ranks --formats npy --summary-json "$work/mpibad.json" > /dev/null 2> "$work/mpibad.err"
  status=$?
  if [ $status = 1 ] && /usr/bin/python3 - "$work/mpibad.json" "$work/mpibad.err" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
line = [l for l in open(sys.argv[2]) if l.startswith("facegen: error on rank")][0].strip()
assert s["ok"] is False and s["error"]["exit_status"] == 1 and "facegen: error " + s["error"]["message"] == line, (s, line)
PY
  then
    pass "MPI, a bad latent: rank 0's JSON holds the failing rank's line ($(grep -o 'on rank [0-9]*' "$work/mpibad.err" | head -1))"
  else
    fail "MPI failure JSON" "status $status: $(head -c 300 "$work/mpibad.json" 2> /dev/null) $(grep facegen "$work/mpibad.err" | head -2)"
  fi
else
  fail "MPI run" "$(tail -3 "$work/stderr")"
fi
if command -v mpirun > /dev/null && ldd "$prog" | grep -q libmpi && command -v script > /dev/null; then
  # run_parallel.sh on a terminal: the ranks' stderr is a pipe, yet rank 0 draws the bar on the terminal.
  timeout -s KILL 120 script -qec "timeout 120 ./run_parallel.sh --program $prog --model $model --random 1024 --output $work/mpitty \
    --ranks-per-node 2 -- --device cpu --threads 1" /dev/null > "$work/tty.out" 2>&1
  draws=$(tr '\r' '\n' < "$work/tty.out" | grep -cE '^\[[# ]+\] [0-9]+/1024 images')
  if [ "$draws" -ge 3 ] && tr '\r' '\n' < "$work/tty.out" | grep -q '^\[#\+\] 1024/1024 images'; then
    pass "MPI on a terminal: rank 0's bar, drawn $draws times, reaches the job's 1,024 images"
  else
    fail "MPI bar" "$draws draws: $(tr '\r' '\n' < "$work/tty.out" | head -5)"
  fi
fi

suite_end
