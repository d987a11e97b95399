#!/usr/bin/env bash
# The main job on the shipped model: convert stories260K to .jlm, inspect it,
# and generate text from it (greedy, so the output is llama.cpp's).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${TMPDIR:-/tmp}/jitllm-demo
mkdir -p "$out"
./bin/jitllm convert -f testdata/stories260K.gguf "$out/stories260K.jlm"
./bin/jitllm inspect -verify "$out/stories260K.jlm" > "$out/inspect.txt"
head -12 "$out/inspect.txt"
./bin/jitllm run "$out/stories260K.jlm" -p "Once upon a time" -n 64 --temp 0 -v
