package exec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
)

// The inline conversion is quant's for every exponent, with every pattern
// of the 14 low mantissa bits (the dropped bits and the kept low bit that
// decide the rounding) under all-zero, all-one and random upper bits.
func TestF32ToF16MatchesQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for sign := uint32(0); sign < 2; sign++ {
		for e := uint32(0); e < 256; e++ {
			for _, hi := range []uint32{0, 0x1ff, r.Uint32() & 0x1ff, r.Uint32() & 0x1ff} {
				for lo := uint32(0); lo < 1<<14; lo++ {
					b := sign<<31 | e<<23 | hi<<14 | lo
					f := math.Float32frombits(b)
					if got, want := f32tof16(f), quant.F32ToF16(f); got != want {
						t.Fatalf("%#08x (%g): %#04x, quant %#04x", b, f, got, want)
					}
				}
			}
		}
	}
}
