package legacy

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
)

// TestDotMXFP4AVX2Reference checks the Go reference against quant's generic
// MXFP4 dot: equal for one block (one rounding either way), and within
// float32 reassociation error for longer rows.
func TestDotMXFP4AVX2Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{32, 64, 96, 256, 2048, 2080} {
		for trial := 0; trial < 10; trial++ {
			f := make([]float32, n)
			g := make([]float32, n)
			var mag float64
			for i := range f {
				f[i], g[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			w, x := make([]byte, n/32*17), make([]byte, n/32*34)
			if err := quant.Quantize(quant.MXFP4, f, w); err != nil {
				t.Fatal(err)
			}
			if err := quant.QuantizeRowX86(quant.Q8_0, g, x); err != nil {
				t.Fatal(err)
			}
			wd, xd := make([]float32, n), make([]float32, n)
			if err := quant.Dequantize(quant.MXFP4, w, wd); err != nil {
				t.Fatal(err)
			}
			if err := quant.Dequantize(quant.Q8_0, x, xd); err != nil {
				t.Fatal(err)
			}
			for i := range wd {
				mag += math.Abs(float64(wd[i]) * float64(xd[i]))
			}
			got, generic := DotMXFP4AVX2(n, w, x), quant.VecDot(quant.MXFP4, n, w, x)
			if n == 32 && got != generic {
				t.Fatalf("one block: %v, generic %v", got, generic)
			}
			if d := math.Abs(float64(got) - float64(generic)); d > float64(1e-5*mag)+1e-30 {
				t.Fatalf("n=%d: %v vs generic %v (|terms| %v)", n, got, generic, mag)
			}
		}
	}
}
