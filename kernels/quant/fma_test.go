package quant

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fmaExact rounds a*b+c once, through big.Float.
func fmaExact(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

func TestFMA32RoundsOnce(t *testing.T) {
	// A product that is a float32 tie plus a tiny addend: double rounding
	// ties to even, the single rounding goes up.
	a := float32(1 + 0x1p-12)
	b := float32(1 + 0x1p-12) // a*b = 1 + 2^-11 + 2^-24: the tie between two float32s
	c := float32(0x1p-60)
	if got, want := FMA32(a, b, c), fmaExact(a, b, c); got != want {
		t.Fatalf("tie case: FMA32 = %x, exact %x", math.Float32bits(got), math.Float32bits(want))
	}
	if float32(math.FMA(float64(a), float64(b), float64(c))) == fmaExact(a, b, c) {
		t.Fatalf("the tie case no longer shows double rounding; pick another")
	}
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func() float32 {
		return math.Float32frombits(r.Uint32()&0x807fffff | uint32(100+r.IntN(56))<<23)
	}
	for i := 0; i < 200000; i++ {
		a, b, c := rnd(), rnd(), rnd()
		if i%2 == 0 { // addends far below the product's ulp
			c = float32(math.Ldexp(float64(c), -40))
		}
		if got, want := FMA32(a, b, c), fmaExact(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("FMA32(%g, %g, %g) = %g, exact %g", a, b, c, got, want)
		}
	}
}

// ExpfAVX512 builds its final power of two from bits; that equals
// _mm512_scalef_ps's j·2^n computed by math.Ldexp.
func TestExpfAVX512ScaleMatchesLdexp(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 1<<20; i++ {
		x := math.Float32frombits(r.Uint32())
		if i%2 == 0 {
			x = float32(r.NormFloat64() * 60)
		}
		got := ExpfAVX512(x)
		// The same steps with math.Ldexp for the scaling.
		const rr = float32(0x1.8p23)
		z := fma32(x, 0x1.715476p+0, rr)
		n := z - rr
		b := fma32(-n, 0x1.7f7d1cp-20, fma32(-n, 0x1.62e4p-1, x))
		u := float32(b * b)
		j := fma32(fma32(fma32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, fma32(0x1.555e66p-3, b, 0x1.fffdb6p-2)), u, fma32(0x1.ffffecp-1, b, 1))
		want := float32(math.Ldexp(float64(j), int(n)))
		if abs32(n) > 192 {
			continue // saturated before the scaling
		}
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("ExpfAVX512(%g) = %g, Ldexp form %g", x, got, want)
		}
	}
}
