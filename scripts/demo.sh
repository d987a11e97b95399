#!/usr/bin/env bash
# The main job on the shipped model: convert stories260K to .jlm and inspect it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${TMPDIR:-/tmp}/jitllm-demo
mkdir -p "$out"
./bin/jitllm convert -f testdata/stories260K.gguf "$out/stories260K.jlm"
./bin/jitllm inspect "$out/stories260K.jlm" | head -30
