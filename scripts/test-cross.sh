#!/usr/bin/env bash
# Runs the exactness-critical tests where the Go compiler may fuse FMAs:
# arm64 (under qemu-user) and amd64 with GOAMD64=v3. The portable Go path
# must give llama.cpp's bits there too (gen/nofma keeps products unfused).
# Under qemu the arm64 run also exercises kernels/arm64's NEON assembly
# (qemu's CPU has ASIMD and DotProd, so both builds run) against cpugen,
# and runtime/exec's golden tests through it; vet checks its frames.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v qemu-aarch64-static >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test-cross: installing Debian's qemu-user-static" >&2
    export DEBIAN_FRONTEND=noninteractive
    (apt-get install -y qemu-user-static || { apt-get update && apt-get install -y qemu-user-static; }) >/dev/null
  else
    echo "test-cross: qemu-aarch64-static missing; run: apt-get install -y qemu-user-static" >&2
    exit 1
  fi
fi
pkgs="./kernels/quant ./kernels/cpugen ./runtime/exec"
GOARCH=arm64 go vet ./kernels/arm64/...
GOARCH=arm64 go test -count=1 -exec qemu-aarch64-static $pkgs ./kernels/arm64/...
GOAMD64=v3 go test -count=1 $pkgs
