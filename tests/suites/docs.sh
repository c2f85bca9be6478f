#!/usr/bin/env bash
# docs.sh: the documentation says what is true.
#
#   README.md is at most 12 KB and carries the two commands (set up and run; test)
#   every path docs/architecture.md names exists
#   every link between the pages leads to a file that exists
#   the flags of `facegen --help` and `facegen serve --help` and the flags tables of docs/usage.md are the
#   same set, and every flag the README's table names is one of them
# Usage: docs.sh [build]
set -u
cd "$(dirname "$0")/../.."
. tests/lib/suite.sh docs
build=${1:-build}
prog=$build/facegen
[ -x "$prog" ] || { echo "docs: $prog is missing (run make test)"; exit 1; }

echo "the documentation:"
bytes=$(wc -c < README.md)
if [ "$bytes" -le 12288 ] && grep -q 'make deps && make run INPUT=input1 OUTPUT=output1' README.md &&
   grep -q 'make test-deps && make test test-sanitize' README.md; then
  pass "README.md: $bytes bytes (at most 12,288), with the commands to set up, run and test"
else
  fail "README.md" "$bytes bytes, or a command to set up, run or test is missing"
fi

missing=()
while read -r path; do
  [ -e "$path" ] || missing+=("$path")
done < <(grep -o '`[A-Za-z_./-]*[./][A-Za-z_./-]*`' docs/architecture.md | tr -d '`' | grep '/' | sort -u)
if [ ${#missing[@]} -eq 0 ]; then
  pass "docs/architecture.md: every path it names exists"
else
  fail "docs/architecture.md" "names paths that do not exist: ${missing[*]}"
fi

broken=()
for page in README.md docs/*.md BENCHMARKS.md; do
  dir=$(dirname "$page")
  while read -r target; do
    target=${target%%#*}
    [ -z "$target" ] && continue
    [ -e "$dir/$target" ] || broken+=("$page -> $target")
  done < <(grep -o '](\([^)h#][^)]*\))' "$page" | sed 's/^](//; s/)$//')
done
if [ ${#broken[@]} -eq 0 ]; then
  pass "links between the pages lead to files that exist"
else
  fail "links" "${broken[*]}"
fi

help_flags=$({ "$prog" --help; "$prog" serve --help; } | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
table_flags=$(grep '^| `' docs/usage.md | cut -d'|' -f2 | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
readme_flags=$(grep '^| `' README.md | cut -d'|' -f2 | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
only_help=$(comm -23 <(echo "$help_flags") <(echo "$table_flags") | tr '\n' ' ')
only_table=$(comm -13 <(echo "$help_flags") <(echo "$table_flags") | tr '\n' ' ')
readme_extra=$(comm -13 <(echo "$help_flags") <(echo "$readme_flags") | tr '\n' ' ')
if [ -z "$only_help$only_table" ]; then
  pass "--help and docs/usage.md list the same $(echo "$help_flags" | wc -l) flags"
else
  fail "--help against docs/usage.md" "only in --help: ${only_help:-none}; only in the table: ${only_table:-none}"
fi
if [ -z "$readme_extra" ]; then
  pass "every flag of the README's table is one of --help's"
else
  fail "README's flags" "not in --help: $readme_extra"
fi

suite_end
