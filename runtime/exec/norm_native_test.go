package exec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpugen"
)

// rmsNormNative is cpugen.RMSNorm and RMSNormNoWeight bit for bit, on
// rows of every scale and with extreme values mixed in.
func TestRMSNormNativeMatches(t *testing.T) {
	sc := elemNative.Scale
	if sc == nil {
		t.Skip("no native Scale registered on this CPU")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 15, 16, 33, 576, 2048, 2048 + 5} {
		for trial := 0; trial < 20; trial++ {
			x, w := make([]float32, n), make([]float32, n)
			s := math.Exp2(float64(r.IntN(80) - 40))
			for i := range x {
				x[i] = float32(r.NormFloat64() * s)
				w[i] = float32(r.NormFloat64())
				if trial%4 == 3 && r.IntN(20) == 0 {
					x[i] = []float32{0, 1e-42, -3e38, 65504, float32(math.Inf(1)), float32(math.NaN())}[r.IntN(6)]
				}
			}
			eps := []float32{1e-5, 1e-6, 0}[trial%3]
			for _, ww := range [][]float32{w, nil} {
				want, got := make([]float32, n), make([]float32, n)
				if ww != nil {
					cpugen.RMSNorm(x, ww, want, eps)
				} else {
					cpugen.RMSNormNoWeight(x, want, eps)
				}
				rmsNormNative(sc, x, ww, got, eps)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
						t.Fatalf("n %d weight %v [%d]: %v, cpugen %v", n, ww != nil, i, got[i], want[i])
					}
				}
			}
		}
	}
}
