package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

var decodeTypes = []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
	Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0}

func TestDequantizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 1024
	for _, typ := range decodeTypes {
		if !CanDequantize(typ) {
			t.Fatalf("CanDequantize(%s) = false", typ)
		}
		for rep := 0; rep < 4; rep++ {
			src := randomBlocks(r, typ, n)
			got := make([]float32, n)
			if err := Dequantize(typ, src, got); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			want := refDecode(typ, src, n)
			for i := range got {
				if w := float32(want[i]); got[i] != w && !(math.IsNaN(float64(got[i])) && math.IsNaN(want[i])) {
					t.Fatalf("%s: value %d = %g, reference %g", typ, i, got[i], w)
				}
			}
		}
	}
}

func TestDequantizeErrors(t *testing.T) {
	if err := Dequantize(IQ2_XXS, make([]byte, 66), make([]float32, 256)); err == nil {
		t.Error("IQ2_XXS: no error")
	} else if !contains(err.Error(), "IQ2_XXS") {
		t.Errorf("error %q does not name the type", err)
	}
	if err := Dequantize(Q4_0, make([]byte, 17), make([]float32, 32)); err == nil {
		t.Error("short source: no error")
	}
	if err := Dequantize(Q4_0, make([]byte, 18), make([]float32, 31)); err == nil {
		t.Error("partial block: no error")
	}
	if CanDequantize(IQ1_S) || CanDequantize(Type(99)) {
		t.Error("CanDequantize claims an unsupported type")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestFP16(t *testing.T) {
	// every half survives a round trip through float32
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, g)
		}
	}
	// random float32s round to the nearest half, ties to even
	r := rand.New(rand.NewPCG(3, 4))
	for k := 0; k < 200000; k++ {
		f := math.Float32frombits(r.Uint32())
		if k%2 == 0 { // mostly in or near half range
			f = float32(math.Ldexp(float64(r.Float64()*2)-1, r.IntN(44)-28))
		}
		if math.IsNaN(float64(f)) {
			continue
		}
		if g, w := F32ToF16(f), nearestHalf(float64(f)); g != w {
			t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", f, g, w)
		}
	}
	// exact midpoints between adjacent halves go to the even one
	for h := uint16(0); h < 0x7bff; h += 37 {
		lo, hi := float64(F16ToF32(h)), float64(F16ToF32(h+1))
		mid := float32((lo + hi) / 2)
		want := h
		if h&1 == 1 {
			want = h + 1
		}
		if g := F32ToF16(mid); g != want {
			t.Fatalf("midpoint of %#04x,%#04x -> %#04x", h, h+1, g)
		}
	}
	if F32ToF16(65520) != 0x7c00 || F32ToF16(65519.99) != 0x7bff || F32ToF16(-1e9) != 0xfc00 {
		t.Error("overflow handling")
	}
}

// nearestHalf finds the correctly rounded half by bisection over the
// (monotone) positive encodings.
func nearestHalf(x float64) uint16 {
	sign := uint16(0)
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	if x >= 65520 { // max half 65504 plus half an ulp (16)
		return sign | 0x7c00
	}
	lo, hi := uint16(0), uint16(0x7bff)
	for lo < hi { // largest encoding with value <= x
		mid := (lo + hi + 1) / 2
		if float64(F16ToF32(mid)) <= x {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0x7bff {
		return sign | lo
	}
	a, b := float64(F16ToF32(lo)), float64(F16ToF32(lo+1))
	switch {
	case x-a < b-x:
		return sign | lo
	case x-a > b-x:
		return sign | (lo + 1)
	case lo&1 == 0:
		return sign | lo
	}
	return sign | (lo + 1)
}

func TestBF16(t *testing.T) {
	cases := []struct {
		f float32
		h uint16
	}{
		{1, 0x3f80}, {-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x7f800001), 0x7fc0}, // signalling NaN made quiet
	}
	for _, c := range cases {
		if g := F32ToBF16(c.f); g != c.h {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(c.f), g, c.h)
		}
	}
	for h := 0; h < 1<<16; h += 7 {
		if f := BF16ToF32(uint16(h)); !math.IsNaN(float64(f)) && F32ToBF16(f) != uint16(h) {
			t.Fatalf("bf16 %#04x does not round-trip", h)
		}
	}
}

func randomActivations(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
		if r.IntN(50) == 0 {
			x[i] *= 8 // outliers, as real activations have
		}
	}
	return x
}

var dotTypes = []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1,
	Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0}

func TestVecDot(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 1024
	for _, typ := range dotTypes {
		vt := VecDotType(typ)
		for rep := 0; rep < 8; rep++ {
			w := randomBlocks(r, typ, n)
			x := randomActivations(r, n)
			xq := make([]byte, RowSize(vt, n))
			if err := QuantizeRow(vt, x, xq); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			wf := refDecode(typ, w, n)
			xf := refDecode(vt, xq, n)
			var want, mag float64
			for i := range wf {
				want += float64(wf[i] * xf[i])
				mag += math.Abs(wf[i] * xf[i])
			}
			if typ == Q4_1 || typ == Q5_1 {
				// the kernel uses the block's stored s = fp16(d*sum(q)) for
				// the min term; take the same in the reference
				mOff := 2
				for b := 0; b < n/32; b++ {
					xb := xq[b*36:]
					var sq float64
					for j := 0; j < 32; j++ {
						sq += float64(int8(xb[4+j]))
					}
					m := h16(w[b*RowSize(typ, 32):], mOff)
					want += float64(m * (h16(xb, 2) - float64(h16(xb, 0)*sq)))
				}
			}
			got := float64(VecDot(typ, n, w, xq))
			if err := math.Abs(got - want); err > float64(2e-6*mag)+1e-30 {
				t.Errorf("%s: VecDot = %g, reference %g (error %.3g of magnitude %.3g)", typ, got, want, err, mag)
			}
		}
	}
}

func TestVecDotType(t *testing.T) {
	want := map[Type]Type{
		F32: F32, F16: F16, BF16: BF16,
		Q4_0: Q8_0, Q5_0: Q8_0, Q8_0: Q8_0, IQ4_NL: Q8_0, MXFP4: Q8_0,
		Q4_1: Q8_1, Q5_1: Q8_1,
		Q2_K: Q8_K, Q3_K: Q8_K, Q4_K: Q8_K, Q5_K: Q8_K, Q6_K: Q8_K, IQ4_XS: Q8_K, TQ1_0: Q8_K, TQ2_0: Q8_K,
	}
	for typ, vt := range want {
		if g := VecDotType(typ); g != vt {
			t.Errorf("VecDotType(%s) = %s, want %s", typ, g, vt)
		}
		if !CanVecDot(typ) {
			t.Errorf("CanVecDot(%s) = false", typ)
		}
	}
}

// TestQuantizeRowActivations checks the activation quantizers field by field
// against their definitions.
func TestQuantizeRowActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const n = 512
	x := randomActivations(r, n)
	for _, typ := range []Type{Q8_0, Q8_1} {
		for _, x86 := range []bool{false, true} {
			b := make([]byte, RowSize(typ, n))
			quantize(typ, x, b, x86)
			bs := RowSize(typ, 32)
			qo := bs - 32
			for blk := 0; blk < n/32; blk++ {
				xb, bb := x[32*blk:32*blk+32], b[blk*bs:]
				var amax float64
				for _, v := range xb {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				d := float32(amax) / 127
				if le16(bb, 0) != F32ToF16(d) {
					t.Fatalf("%s block %d: d", typ, blk)
				}
				sum := 0
				for j, v := range xb {
					q := int(int8(bb[qo+j]))
					sum += q
					// within half a step (plus float slack) of x/d
					if e := math.Abs(float64(v)/float64(d) - float64(q)); e > 0.5+1e-4 {
						t.Fatalf("%s block %d value %d: q=%d for x/d=%g", typ, blk, j, q, float64(v)/float64(d))
					}
				}
				if typ == Q8_1 && le16(bb, 2) != F32ToF16(float32(sum)*d) {
					t.Fatalf("Q8_1 block %d: s", blk)
				}
			}
		}
	}
	b := make([]byte, RowSize(Q8_K, n))
	QuantizeRow(Q8_K, x, b)
	for blk := 0; blk < n/256; blk++ {
		bb := b[blk*292:]
		for j := 0; j < 16; j++ {
			s := 0
			for k := 0; k < 16; k++ {
				s += int(int8(bb[4+16*j+k]))
			}
			if int(int16(le16(bb, 260+2*j))) != s {
				t.Fatalf("Q8_K block %d: bsums[%d]", blk, j)
			}
		}
		d := math.Float32frombits(le32(bb, 0))
		for k := 0; k < 256; k++ {
			if e := math.Abs(float64(x[256*blk+k]) - float64(float64(d)*float64(int8(bb[4+k])))); e > 0.5001*math.Abs(float64(d)) {
				t.Fatalf("Q8_K value %d off by %g (d=%g)", k, e, d)
			}
		}
	}
}

// TestQuantizeRowRounding pins the two rounding rules: ggml's reference uses
// roundf (ties away from zero), its x86 SIMD build rounds ties to even.
func TestQuantizeRowRounding(t *testing.T) {
	x := make([]float32, 32)
	x[0] = 127 // d = 1 exactly
	x[1], x[2], x[3] = 2.5, -2.5, 3.5
	ref, avx := make([]byte, 34), make([]byte, 34)
	QuantizeRow(Q8_0, x, ref)
	QuantizeRowX86(Q8_0, x, avx)
	if g := [3]int8{int8(ref[3]), int8(ref[4]), int8(ref[5])}; g != [3]int8{3, -3, 4} {
		t.Errorf("reference rounding: %v", g)
	}
	if g := [3]int8{int8(avx[3]), int8(avx[4]), int8(avx[5])}; g != [3]int8{2, -2, 4} {
		t.Errorf("x86 rounding: %v", g)
	}
	// Q8_K uses nearest_int (ties to even) with scale -127/max (here 1)
	k := make([]float32, 256)
	k[0], k[1], k[2] = -127, 2.5, 3.5
	kb := make([]byte, 292)
	QuantizeRow(Q8_K, k, kb)
	if g := [3]int8{int8(kb[4]), int8(kb[5]), int8(kb[6])}; g != [3]int8{-127, 2, 4} {
		t.Errorf("Q8_K rounding: %v", g)
	}
}

// TestQuantizeRoundTrip bounds the relative RMS error of each quantizer on
// Gaussian data, and checks zero blocks stay zero.
func TestQuantizeRoundTrip(t *testing.T) {
	bounds := map[Type]float64{
		F32: 0, F16: 5e-4, BF16: 4e-3, Q8_0: 0.008, Q8_1: 0.008, Q8_K: 0.008,
		Q4_0: 0.12, Q4_1: 0.11, Q5_0: 0.06, Q5_1: 0.055,
		Q2_K: 0.40, Q3_K: 0.20, Q4_K: 0.10, Q5_K: 0.05, Q6_K: 0.025, MXFP4: 0.16,
	}
	r := rand.New(rand.NewPCG(9, 10))
	const n = 4096
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02)
	}
	for typ, bound := range bounds {
		b := make([]byte, RowSize(typ, n))
		if err := Quantize(typ, x, b); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		y := make([]float32, n)
		Dequantize(typ, b, y)
		if rel := relRMS(x, y); rel > bound {
			t.Errorf("%s: relative RMS error %.4f > %.4f", typ, rel, bound)
		} else {
			t.Logf("%s: relative RMS error %.4f", typ, rel)
		}
		z := make([]float32, 256)
		zb := make([]byte, RowSize(typ, 256))
		Quantize(typ, z, zb)
		Dequantize(typ, zb, z)
		for i, v := range z {
			if v != 0 {
				t.Fatalf("%s: zero block decodes to %g at %d", typ, v, i)
			}
		}
	}
	// ternary data is exact in the ternary formats
	for _, typ := range []Type{TQ1_0, TQ2_0} {
		tern := make([]float32, n)
		for i := range tern {
			tern[i] = float32(r.IntN(3)-1) * 0.5
		}
		b := make([]byte, RowSize(typ, n))
		Quantize(typ, tern, b)
		y := make([]float32, n)
		Dequantize(typ, b, y)
		for i := range y {
			if y[i] != tern[i] {
				t.Fatalf("%s: value %d = %g, want %g", typ, i, y[i], tern[i])
			}
		}
	}
}

func relRMS(x, y []float32) float64 {
	var e, s float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		e += float64(d * d)
		s += float64(float64(x[i]) * float64(x[i]))
	}
	return math.Sqrt(e / s)
}

func TestNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const n = 2048
	x := randomActivations(r, n)
	for _, typ := range dotTypes {
		vt := VecDotType(typ)
		w := randomBlocks(r, typ, n)
		xq := make([]byte, RowSize(vt, n))
		if a := testing.AllocsPerRun(20, func() { QuantizeRow(vt, x, xq) }); a != 0 {
			t.Errorf("QuantizeRow(%s): %v allocations", vt, a)
		}
		if a := testing.AllocsPerRun(20, func() { VecDot(typ, n, w, xq) }); a != 0 {
			t.Errorf("VecDot(%s): %v allocations", typ, a)
		}
		y := make([]float32, n)
		if a := testing.AllocsPerRun(20, func() { Dequantize(typ, w, y) }); a != 0 {
			t.Errorf("Dequantize(%s): %v allocations", typ, a)
		}
	}
}

func benchDot(b *testing.B, typ Type) {
	r := rand.New(rand.NewPCG(13, 14))
	const n = 2048
	vt := VecDotType(typ)
	w := randomBlocks(r, typ, n)
	xq := make([]byte, RowSize(vt, n))
	QuantizeRow(vt, randomActivations(r, n), xq)
	b.SetBytes(int64(len(w)))
	b.ReportAllocs()
	var s float32
	for b.Loop() {
		s += VecDot(typ, n, w, xq)
	}
	_ = s
}

func BenchmarkVecDotQ4_K(b *testing.B) { benchDot(b, Q4_K) }
func BenchmarkVecDotQ8_0(b *testing.B) { benchDot(b, Q8_0) }
func BenchmarkVecDotQ6_K(b *testing.B) { benchDot(b, Q6_K) }
func BenchmarkVecDotQ4_0(b *testing.B) { benchDot(b, Q4_0) }

func BenchmarkQuantizeRowQ8_K(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	x := randomActivations(r, 2048)
	xq := make([]byte, RowSize(Q8_K, 2048))
	b.ReportAllocs()
	for b.Loop() {
		QuantizeRow(Q8_K, x, xq)
	}
}
