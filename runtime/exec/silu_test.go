package exec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
)

// silu is quant.SiLUAVX512 bit for bit: over random values of every scale,
// the range edges of its exp, and the special values.
func TestSiLUMatchesQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	x := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 88, -88, 89, -89, 103, -104, 133, -133, 192, -192, 1e30, -1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-40, math.MaxFloat32, -math.MaxFloat32}
	for len(x) < 1<<20 {
		x = append(x, float32(r.NormFloat64()*math.Pow(10, float64(r.Float64()*6)-3)))
		x = append(x, math.Float32frombits(r.Uint32()))
	}
	x = x[:len(x)-3] // a tail that is not a multiple of 16
	got, want := make([]float32, len(x)), make([]float32, len(x))
	silu(x, got)
	quant.SiLUAVX512(x, want)
	for i := range x {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("silu(%v (%#x)) = %v, quant %v", x[i], math.Float32bits(x[i]), got[i], want[i])
		}
	}
}

// The native blocks agree with quant.SiLUAVX512 (the portable path) on the
// same values.
func TestSiLUNativeMatchesQuant(t *testing.T) {
	if siluBlocks == nil {
		t.Skip("no native SiLU registered on this CPU")
	}
	r := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, 1<<18)
	for i := range x {
		if i%2 == 0 {
			x[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.Float64()*6)-3))
		} else {
			x[i] = math.Float32frombits(r.Uint32())
		}
	}
	want, got := make([]float32, len(x)), make([]float32, len(x))
	quant.SiLUAVX512(x, want)
	siluBlocks(x, got)
	for i := range x {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("native silu(%v (%#x)) = %v, quant %v", x[i], math.Float32bits(x[i]), got[i], want[i])
		}
	}
}

func BenchmarkSiLURow(b *testing.B) {
	x, y := make([]float32, 8192*64), make([]float32, 8192*64)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range x {
		x[i] = float32(r.NormFloat64() * 4)
	}
	b.SetBytes(4 * int64(len(x)))
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			quant.SiLUAVX512(x, y)
		}
	})
	b.Run("exec", func(b *testing.B) {
		for b.Loop() {
			silu(x, y)
		}
	})
}
