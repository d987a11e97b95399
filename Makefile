GO ?= go
BIN := bin

.PHONY: all build test demo generate check-generated vet fuzz bench-convert

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The main job on the shipped model (see README).
demo: build
	./scripts/demo.sh

# Everything CI runs: formatting, vet, generated files current, tests.
test: vet check-generated
	$(GO) test -count=1 ./...

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

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
