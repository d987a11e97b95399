package exec

import (
	"runtime"
	"testing"

	"github.com/klauspost/cpuid/v2"
)

// On arm64 the Q8_0, Q4_K and Q6_K matmuls run kernels/arm64/neon's
// assembly (the SDOT build where the CPU has FEAT_DotProd), not the
// generated Go: the golden tests then hold it to llama.cpp's tokens.
func TestArm64RunsNEON(t *testing.T) {
	if runtime.GOARCH != "arm64" || !cpuid.CPU.Supports(cpuid.ASIMD) {
		t.Skipf("%s: no NEON kernels", runtime.GOARCH)
	}
	want := "neon"
	if cpuid.CPU.Supports(cpuid.ASIMDDP) {
		want = "dotprod"
	}
	seen := map[string]bool{}
	for _, model := range []string{"synthetic/tiny256-Q4_K_M.gguf", "synthetic/tiny256-Q8_0.gguf"} {
		r := load(t, model, Options{})
		if _, err := r.Forward([]int32{1, 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Forward([]int32{3}); err != nil {
			t.Fatal(err)
		}
		for _, k := range r.Kernels() {
			switch k.Type {
			case "Q8_0", "Q4_K", "Q6_K":
				if k.ISA != want {
					t.Errorf("%s %s (%s rows): %s/%s, want the %s kernel", model, k.Weight, k.Rows, k.Order, k.ISA, want)
				}
				seen[k.Type] = true
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("types seen %v: the models no longer cover Q8_0, Q4_K and Q6_K", seen)
	}
}
