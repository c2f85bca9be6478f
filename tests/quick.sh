#!/usr/bin/env bash
# quick.sh: the inner loop's tests (make test-quick): the unit tests, the command line, and the suites
# of the folders a change touches, side by side through tests/run_all.sh, in about a minute and a half.
#
# The change: every file that differs from where this branch left main (git merge-base HEAD main;
# HEAD where there is no main), committed or not, and every new file git does not ignore. Each path
# is matched against the table below, first match of each line counting; a change that touches no
# listed path runs the unit tests and the command line alone. QUICK_SUITES="a b" names the suites
# instead. make test runs everything; this is no substitute for it before a merge.
# Usage: tests/quick.sh [build]; the verdict and exit status are run_all.sh's.
set -u
cd "$(dirname "$0")/.."
build=${1:-build}

# PATH-PREFIX  SUITES: a change under PATH-PREFIX runs SUITES. A suite's own script runs itself.
suites_of() {
  case $1 in
    tests/suites/*.sh) basename "$1" .sh ;;
    latents/*) echo seed_lists changing_inputs ;;
    formats/*) echo mosaic_grid shards ;;
    commit/*|common/file_descriptor*|common/temp_registry*) echo foreign_journals resume long_paths ;;
    engine/*) echo shards progress_summary resume ;;
    run/*) echo progress_summary resume ;;
    serve/*|tests/lib/serve_*|tests/lib/hostile_client.py|tests/lib/oip_client.py|tests/lib/raw_http.py) echo serve serve_hostile serve_oip ;;
    tests/lib/load_client.py) echo serve_load ;;
    mpi/*|run_parallel.sh) echo mpi_ranks launcher_ends ;;
    slurm/*|tests/lib/slurm_cluster.sh|tests/lib/munge.sh) echo slurm_local ;;
    tests/lib/virtual_cluster.sh) echo serve_cluster ;;
    generator/*|kernels/*|models/*|tools/export_model.py|tests/model_files.py) echo model_files ;;
    fuzz/*) echo fuzz_smoke ;;
    docs/*|README.md|*.md) echo docs ;;
    Makefile) echo make_install ;;
  esac
}

if [ -n "${QUICK_SUITES:-}" ]; then
  suites=$QUICK_SUITES
else
  base=$(git merge-base HEAD main 2> /dev/null || echo HEAD)
  changed=$( { git diff --name-only "$base" --; git ls-files --others --exclude-standard; } 2> /dev/null | sort -u)
  suites=$(for path in $changed; do suites_of "$path"; done | tr ' ' '\n' | sort -u | tr '\n' ' ')
  echo "changed since ${base:0:12}: $(echo "$changed" | wc -w) files; their suites: ${suites:-none}"
fi
for name in $suites; do
  [ -f "tests/suites/$name.sh" ] || { echo "quick: no suite tests/suites/$name.sh"; exit 2; }
done
TEST_ONLY="unit cli $suites" BUILD=$build exec bash tests/run_all.sh
