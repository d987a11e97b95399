package opstest

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(2000).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(2000).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(2000).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

// fma32 rounds once: 24929·673 = 2^24+1 is a float32 midpoint, so a tiny
// addend decides it, which float32(math.FMA(...)) loses.
func TestFMA32(t *testing.T) {
	for _, c := range []struct{ a, b, c, want float32 }{
		{24929, 673, 1e-30, 16777218},
		{24929, 673, -1e-30, 16777216},
		{24929, 673, 0, 16777216},
		{-24929, 673, 1e-30, -16777216},
	} {
		if got := fma32(c.a, c.b, c.c); got != c.want {
			t.Errorf("fma32(%v, %v, %v) = %v, want %v", c.a, c.b, c.c, got, c.want)
		}
	}
	if got := float32(math.FMA(24929, 673, 1e-30)); got == 16777218 {
		t.Log("math.FMA through float64 got the tie right here; the case above no longer shows the double rounding")
	}
	r := rand.New(rand.NewPCG(1, 2))
	f := func() float32 {
		return float32(math.Ldexp(float64(r.Float64()*2)-1, r.IntN(120)-60))
	}
	for i := 0; i < 200000; i++ {
		a, b, c := f(), f(), f()
		if i%2 == 0 { // products on a midpoint: 24-bit a times small odd b
			a, b = float32(math.Ldexp(float64(1<<23+2*r.IntN(1<<22)+1), r.IntN(40)-20)), float32(1+2*r.IntN(8))
			c = float32(math.Ldexp(float64(c), -40))
		}
		if got, want := fma32(a, b, c), exactFMA32(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%v, %v, %v) = %v, exact %v", a, b, c, got, want)
		}
	}
}
