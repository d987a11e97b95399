GO ?= go
BIN := bin

.PHONY: all build build-cross test test-cross demo generate check-generated vet fuzz bench-convert

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The main job on the shipped model (see README).
demo: build
	./scripts/demo.sh

# Everything CI runs: formatting, vet, generated files current, tests.
# ptxas (scripts/get-ptxas.sh) lets TestKernelsAssemble assemble the CUDA
# runner's PTX; without it that test skips.
test: vet check-generated build-cross
	d=$$(./scripts/get-ptxas.sh) && PATH="$$d:$$PATH"; export PATH; $(GO) test -count=1 ./...
	./scripts/test-cross.sh

# Every package builds for the other targets a release ships (no cgo).
build-cross:
	for t in linux/arm64 darwin/arm64 windows/amd64; do \
		GOOS=$${t%/*} GOARCH=$${t#*/} CGO_ENABLED=0 $(GO) build ./... || exit 1; \
	done

# The exactness tests on arm64 (qemu-user) and GOAMD64=v3, where Go may fuse FMAs.
test-cross:
	./scripts/test-cross.sh

# Packages whose float arithmetic must round as llama.cpp's does: no product
# may be left for the compiler to fuse into an FMA (arm64, GOAMD64=v3).
NOFMA_PKGS := ./kernels/quant/... ./kernels/ops/... ./kernels/cpugen/... ./kernels/cpukern/... \
	./kernels/amd64/... ./kernels/arm64/... ./runtime/exec/... ./runtime/sample/... ./runtime/gpuexec/... ./dsl/kernel/...

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./gen/nofma/cmd $(NOFMA_PKGS)

generate:
	$(GO) generate ./...

# Fails when `go generate` would change a checked-in file.
check-generated:
	./scripts/check-generated.sh

# Short fuzzing pass over every parser (seeds in testdata).
fuzz:
	./scripts/fuzz.sh 20s

bench-convert:
	$(GO) test -run '^$$' -bench BenchmarkConvert -benchtime 1x -timeout 20m ./runtime/convert/
