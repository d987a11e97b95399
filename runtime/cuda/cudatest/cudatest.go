// Package cudatest builds a stand-in CUDA driver for tests: a shared
// library exporting every entry point runtime/cuda binds, each succeeding
// and doing nothing but hand out handles, sizes and host memory. It runs no
// kernel and copies no byte; it lets the Go side of the CUDA runtime (the
// calls it makes, what they allocate) be checked on a machine without a
// GPU. Load it with cuda.LoadLibrary in a process of its own (a loaded
// driver is process-wide state): see Child.
package cudatest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/cuda"
)

// Env names the stand-in's path in a child test process (Child).
const Env = "JITLLM_FAKE_CUDA"

// ErrNoCompiler says no C compiler was found to build the stand-in.
var ErrNoCompiler = errors.New("no C compiler (gcc or cc) to build the stand-in CUDA driver")

// special are the entry points that write an out-parameter.
var special = map[string]string{
	"cuDriverGetVersion":                          "int cuDriverGetVersion(int *v) { *v = 12040; return 0; }",
	"cuDeviceGetCount":                            "int cuDeviceGetCount(int *n) { *n = 1; return 0; }",
	"cuDeviceGet":                                 "int cuDeviceGet(int *d, int o) { *d = o; return 0; }",
	"cuDeviceGetName":                             "int cuDeviceGetName(char *s, int n, int d) { strncpy(s, \"stand-in\", n); return 0; }",
	"cuDeviceGetAttribute":                        "int cuDeviceGetAttribute(int *v, int a, int d) { *v = a == 76 ? 0 : 9; return 0; }",
	"cuDeviceTotalMem_v2":                         "int cuDeviceTotalMem_v2(size_t *b, int d) { *b = (size_t)8 << 30; return 0; }",
	"cuDevicePrimaryCtxRetain":                    "int cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)16; return 0; }",
	"cuMemGetInfo_v2":                             "int cuMemGetInfo_v2(size_t *f, size_t *t) { *f = *t = (size_t)8 << 30; return 0; }",
	"cuMemAlloc_v2":                               "int cuMemAlloc_v2(uint64_t *p, size_t n) { *p = (uint64_t)(uintptr_t)malloc(n ? n : 1); return 0; }",
	"cuMemAllocHost_v2":                           "int cuMemAllocHost_v2(void **p, size_t n) { *p = calloc(1, n ? n : 1); return 0; }",
	"cuStreamCreate":                              "int cuStreamCreate(void **s, unsigned f) { *s = (void *)32; return 0; }",
	"cuModuleLoadDataEx":                          "int cuModuleLoadDataEx(void **m) { *m = (void *)48; return 0; }",
	"cuModuleGetFunction":                         "int cuModuleGetFunction(void **f) { *f = (void *)64; return 0; }",
	"cuStreamEndCapture":                          "int cuStreamEndCapture(void *s, void **g) { *g = (void *)80; return 0; }",
	"cuGraphInstantiateWithFlags":                 "int cuGraphInstantiateWithFlags(void **e) { *e = (void *)96; return 0; }",
	"cuEventCreate":                               "int cuEventCreate(void **e, unsigned f) { *e = (void *)112; return 0; }",
	"cuEventElapsedTime_v2":                       "int cuEventElapsedTime_v2(float *ms) { *ms = 1; return 0; }",
	"cuOccupancyMaxActiveBlocksPerMultiprocessor": "int cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n) { *n = 2; return 0; }",
}

// Source is the stand-in's C source. Device memory is host memory from
// malloc (never read or written by the stand-in); compute capability 9.0.
func Source() string {
	var b strings.Builder
	b.WriteString("#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n")
	for _, n := range cuda.EntryPoints() {
		if c, ok := special[n]; ok {
			b.WriteString(c + "\n")
		} else {
			fmt.Fprintf(&b, "int %s() { return 0; }\n", n)
		}
	}
	return b.String()
}

// Build compiles the stand-in into dir and returns its path;
// ErrNoCompiler where there is no C compiler.
func Build(dir string) (string, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			return "", ErrNoCompiler
		}
	}
	src, lib := filepath.Join(dir, "standin.c"), filepath.Join(dir, "libstandincuda.so")
	if err := os.WriteFile(src, []byte(Source()), 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the stand-in CUDA driver: %v\n%s", err, out)
	}
	return lib, nil
}

// Child runs test name of the current test binary again, in a process of
// its own, with Env naming the stand-in built in dir; it returns the
// child's output and whether it passed. The child's test sees Env set and
// loads the stand-in (cuda.LoadLibrary).
func Child(dir, name string) (string, bool, error) {
	lib, err := Build(dir)
	if err != nil {
		return "", false, err
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.v", "-test.count", "1")
	cmd.Env = append(os.Environ(), Env+"="+lib)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil && strings.Contains(string(out), "--- PASS: "+name), nil
}

// Run runs body against the stand-in driver: in the child process Child
// starts (Env set) it loads the stand-in and runs body; in the test's own
// process it builds the stand-in, runs the test named name in a child,
// skips where there is no C compiler, fails with the child's output where
// the child failed, and logs the child's lines that hold mark.
func Run(t *testing.T, name, mark string, body func(t *testing.T)) {
	t.Helper()
	if lib := os.Getenv(Env); lib != "" {
		if err := cuda.LoadLibrary(lib); err != nil {
			t.Fatal(err)
		}
		body(t)
		return
	}
	out, ok, err := Child(t.TempDir(), name)
	if errors.Is(err, ErrNoCompiler) {
		t.Skip(err)
	}
	if err != nil || !ok {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, mark) {
			t.Log(strings.TrimSpace(l))
		}
	}
}
