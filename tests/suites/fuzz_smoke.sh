#!/usr/bin/env bash
# fuzz_smoke.sh: each libFuzzer target (fuzz/) over its regression corpus, then ~20 s of new inputs.
# Exit 0 pass, 77 skipped (with the reason), anything else a finding. Usage: fuzz_smoke.sh [build-dir]
# runner: needs fuzz (the fuzz targets, built beside the first suites)
set -u
cd "$(dirname "$0")/../.."
if [ "${SANITIZE:-0}" = 1 ]; then
  echo "skip: the fuzz targets carry their own sanitizers; they run in the plain pass (make test)"
  exit 77
fi
targets=()
for source in fuzz/fuzz_*.cpp; do
  target=build/fuzz/$(basename "$source" .cpp)
  if [ ! -x "$target" ]; then
    echo "skip: $target is not built (needs clang++-14 and libclang-rt-14-dev: make test-deps, make fuzz)"
    exit 77
  fi
  targets+=("$target")
done
FUZZ_SECONDS=${FUZZ_SECONDS:-20} bash tests/fuzz_run.sh "${targets[@]}"
