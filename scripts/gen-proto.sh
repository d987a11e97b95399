#!/usr/bin/env bash
# Regenerates the control plane's Go code (server/control/gen) from
# server/control/proto with protoc (Debian's protobuf-compiler 3.21.12),
# protoc-gen-go and protoc-gen-connect-go. The two plugins are built from
# the versions go.mod pins (its tool directive), so a run is reproducible;
# `go generate ./server/control` calls this, and scripts/check-generated.sh
# fails when the committed output is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
want=3.21.12

have() { command -v protoc >/dev/null 2>&1 && protoc --version 2>/dev/null | awk '{print $2}'; }
if [ -z "$(have || true)" ]; then
  # CI runs as root on a clean machine: install the compiler there.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "gen-proto: protoc missing; installing Debian's protobuf-compiler" >&2
    export DEBIAN_FRONTEND=noninteractive
    (apt-get install -y protobuf-compiler || { apt-get update && apt-get install -y protobuf-compiler; }) >/dev/null
  else
    echo "gen-proto: protoc is not installed; run: apt-get install -y protobuf-compiler (version $want)" >&2
    exit 1
  fi
fi
got=$(have || true)
if [ "$got" != "$want" ]; then
  # The version is written into every .pb.go header, so another one would
  # make the committed files look stale.
  echo "gen-proto: protoc $got found, $want wanted (Debian bookworm's protobuf-compiler)" >&2
  exit 1
fi
inc=/usr/include
[ -f "$inc/google/protobuf/duration.proto" ] || { echo "gen-proto: $inc/google/protobuf/duration.proto missing (comes with protobuf-compiler / libprotobuf-dev)" >&2; exit 1; }

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" google.golang.org/protobuf/cmd/protoc-gen-go connectrpc.com/connect/cmd/protoc-gen-connect-go

src=server/control/proto
out=server/control/gen
rm -rf "$out"
mkdir -p "$out"
protoc -I "$src" -I "$inc" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --go_out="$out" --go_opt=paths=source_relative \
  --plugin=protoc-gen-connect-go="$bin/protoc-gen-connect-go" --connect-go_out="$out" --connect-go_opt=paths=source_relative \
  $(cd "$src" && find . -name '*.proto' | sed 's#^\./##' | sort)
