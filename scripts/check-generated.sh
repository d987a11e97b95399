#!/usr/bin/env bash
# Runs go generate in a scratch copy of the tree and fails if any checked-in
# file would change, so a stale generated file never lands.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$tmp"/ 2>/dev/null || true
(cd "$tmp" && go generate ./... >/dev/null)
status=0
while IFS= read -r f; do
  if ! cmp -s "$f" "$tmp/$f"; then echo "stale generated file: $f (run make generate)"; status=1; fi
done < <(grep -rl --include='*.go' --include='*.md' --include='*.s' -e 'Code generated' . 2>/dev/null | grep -v '^./testdata' | sed 's#^\./##' || true)
exit $status
