#!/usr/bin/env bash
# Runs each fuzz target for a while (default 20s). Crashers land in the
# package's testdata/fuzz directory and become regression seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-20s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for fz in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //'); do
    echo "== $pkg $fz"
    go test -run '^$' -fuzz "^$fz\$" -fuzztime "$t" "$pkg"
  done
done
