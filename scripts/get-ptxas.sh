#!/usr/bin/env bash
# get-ptxas.sh: puts NVIDIA's ptxas (PTX assembler) in .cache/ptxas/ for
# runtime/gpuexec's TestKernelsAssemble, which assembles every module the
# CUDA runner renders. jitllm never needs it (the driver assembles PTX at
# run time); the test skips without it. Uses ptxas from PATH when there is
# one, else extracts it from Debian trixie's nvidia-cuda-toolkit package
# (non-free; CUDA 12.4: sm_90a, wgmma) fetched with a private apt config,
# so the system's own sources and packages are untouched. Prints the
# directory to put on PATH; exits 1 when it cannot get one.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=$PWD/.cache/ptxas
if [ -x "$dest/ptxas" ]; then echo "$dest"; exit 0; fi
if p=$(command -v ptxas); then dirname "$p"; exit 0; fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "get-ptxas: needs apt-get and dpkg" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie non-free" >"$work/sources.list"
apt=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root
	-o Acquire::http::Timeout=30 -o Acquire::Retries=1)
apt-get "${apt[@]}" -q update >/dev/null
(cd "$work" && apt-get "${apt[@]}" -q download nvidia-cuda-toolkit >/dev/null)
dpkg-deb -x "$work"/nvidia-cuda-toolkit_*.deb "$work/x"
mkdir -p "$dest"
cp "$work/x/usr/bin/ptxas" "$dest/ptxas.tmp" && mv "$dest/ptxas.tmp" "$dest/ptxas"
"$dest/ptxas" --version >/dev/null
echo "$dest"
