//go:build amd64

package elem

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

func needAVX512(t testing.TB) {
	if !cpuid.CPU.Supports(cpuid.AVX512F) {
		t.Skip("CPU lacks AVX-512F")
	}
}

// same compares bits, any NaN matching any NaN (the hardware quiets
// signalling NaNs; payloads are not part of the result).
func same(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// check runs SiLUBlocks on x and compares the blocks with
// quant.SiLUAVX512, and that the values past the last block are left alone.
func check(t testing.TB, x []float32) {
	t.Helper()
	want := make([]float32, len(x))
	quant.SiLUAVX512(x, want)
	got := make([]float32, len(x)+3)
	for i := range got {
		got[i] = -7.25
	}
	SiLUBlocks(x, got)
	np := len(x) &^ 15
	for i := 0; i < np; i++ {
		if !same(got[i], want[i]) {
			t.Fatalf("silu(%v (%#x)) = %v (%#x), quant %v (%#x)", x[i], math.Float32bits(x[i]),
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
	for i := np; i < len(got); i++ {
		if got[i] != -7.25 {
			t.Fatalf("silu of %d values wrote y[%d]", len(x), i)
		}
	}
}

func TestSiLURandom(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 48, 64, 100, 2048 + 5} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(20)-10)))
		}
		check(t, x)
	}
	// uniform bits: every exponent, NaNs and infinities included
	x := make([]float32, 1<<16)
	for r := 0; r < 16; r++ {
		for i := range x {
			x[i] = math.Float32frombits(rng.Uint32())
		}
		check(t, x)
	}
}

func TestSiLUExtremes(t *testing.T) {
	needAVX512(t)
	inf := float32(math.Inf(1))
	x := []float32{0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()),
		math.Float32frombits(0x7fa00000), math.Float32frombits(0xffc00001), // signalling and negative NaN
		math.Float32frombits(1), math.Float32frombits(0x807fffff), math.Float32frombits(0x00800000),
		math.MaxFloat32, -math.MaxFloat32, 1, -1, 88.72, -88.72, 89, -89, 103, -103, 104, -104,
		133, -133, 133.08, -133.08, 133.2, -133.2, 134, -134, 150, -150, 1e4, -1e4, 1e30, -1e30}
	for len(x)%16 != 0 {
		x = append(x, -float32(len(x))*3.7)
	}
	check(t, x)
	// every float32 near the cut-offs: |n| = 192 (|x| ≈ 133.08), the
	// float32 overflow and underflow of exp (88.7, 103.9)
	var y []float32
	for _, c := range []float32{133.08, 88.72, 87.33, 103.97, 104, 0.5} {
		for _, s := range []float32{1, -1} {
			b := math.Float32bits(s * c)
			for d := uint32(0); d < 1<<14; d++ {
				y = append(y, math.Float32frombits(b-1<<13+d))
			}
		}
	}
	check(t, y)
}

// TestSiLUSweep checks every 127th float32 bit pattern (34 M values).
func TestSiLUSweep(t *testing.T) {
	needAVX512(t)
	if testing.Short() {
		t.Skip("long sweep")
	}
	x := make([]float32, 1<<16)
	b := uint64(0)
	for b < 1<<32 {
		for i := range x {
			x[i] = math.Float32frombits(uint32(b))
			b += 127
		}
		check(t, x)
	}
}

func TestRegistered(t *testing.T) {
	e, ok := cpukern.LookupElementwise()
	if cpuid.CPU.Supports(cpuid.AVX512F) != (ok && e.SiLU != nil) {
		t.Fatalf("AVX-512F %v, registered %v", cpuid.CPU.Supports(cpuid.AVX512F), ok)
	}
}

func TestSiLUAllocs(t *testing.T) {
	needAVX512(t)
	e, _ := cpukern.LookupElementwise()
	x, y := make([]float32, 8192), make([]float32, 8192)
	if n := testing.AllocsPerRun(100, func() { e.SiLU(x, y) }); n != 0 {
		t.Fatalf("%v allocations a call", n)
	}
}

func FuzzSiLU(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, data []byte) {
		if !cpuid.CPU.Supports(cpuid.AVX512F) {
			t.Skip("CPU lacks AVX-512F")
		}
		x := make([]float32, len(data)/4)
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		check(t, x)
	})
}

func BenchmarkSiLU(b *testing.B) {
	x, y := make([]float32, 8192*64), make([]float32, 8192*64)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 4)
	}
	b.SetBytes(4 * int64(len(x)))
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			quant.SiLUAVX512(x, y)
		}
	})
	b.Run("avx512", func(b *testing.B) {
		needAVX512(b)
		for b.Loop() {
			SiLUBlocks(x, y)
		}
	})
}

// checkExp compares Exp with math.Exp bit for bit (NaN payloads included:
// math.Exp returns a NaN argument itself, and so does Exp).
func checkExp(t testing.TB, x []float64) {
	t.Helper()
	got := make([]float64, len(x)+1)
	got[len(x)] = -3.5
	Exp(x, got)
	for i, v := range x {
		if w := math.Exp(v); math.Float64bits(got[i]) != math.Float64bits(w) {
			t.Fatalf("exp(%v (%#x)) = %v (%#x), math.Exp %v (%#x)", v, math.Float64bits(v),
				got[i], math.Float64bits(got[i]), w, math.Float64bits(w))
		}
	}
	if got[len(x)] != -3.5 {
		t.Fatalf("exp of %d values wrote past them", len(x))
	}
}

func TestExp(t *testing.T) {
	needAVX512(t)
	inf := math.Inf(1)
	x := []float64{0, math.Copysign(0, -1), 1, -1, inf, -inf, math.NaN(), math.Float64frombits(0x7ff0000000000001),
		math.Float64frombits(0xfff8000000000123), 5e-324, -5e-324, math.MaxFloat64, -math.MaxFloat64,
		7.09782712893384e+02, math.Nextafter(7.09782712893384e+02, inf), 709.7, 710, -708.39, -708.4, -709, -744.4, -745.13, -745.2,
		-746, -1e10, 1e10, -1e300, 1e300, 0.5 * math.Ln2, -0.5 * math.Ln2, 88, -88, -103, -104, 1e-20, -1e-20}
	checkExp(t, x)
	// every float64 near the cut-offs, and around the rounding points of
	// x·LOG2E (half-integers) and the denormal boundaries
	var y []float64
	for _, c := range []float64{709.782712893384, 708.39, 709.09, -708.39, -708.4, -709.09, -744.44, -745.13, -745.2,
		0.5 * math.Ln2, 1.5 * math.Ln2, -1.5 * math.Ln2, -1000.5 * math.Ln2, -1074.5 * math.Ln2, -1022.5 * math.Ln2, -1021.5 * math.Ln2} {
		b := math.Float64bits(c)
		for d := uint64(0); d < 1<<12; d++ {
			y = append(y, math.Float64frombits(b-1<<11+d))
		}
	}
	checkExp(t, y)
	rng := rand.New(rand.NewPCG(5, 6))
	z := make([]float64, 1<<16+5)
	for r := 0; r < 16; r++ {
		for i := range z {
			switch i % 4 {
			case 0:
				z[i] = math.Float64frombits(rng.Uint64())
			case 1:
				z[i] = (float64(rng.Float64()*2) - 1) * 800
			case 2: // softmax arguments: float32 values, mostly small negatives
				z[i] = float64(float32(-rng.ExpFloat64() * math.Exp2(float64(rng.IntN(16)-8))))
			default:
				z[i] = float64(math.Float32frombits(rng.Uint32()))
			}
		}
		checkExp(t, z[:len(z)-r])
	}
}

// TestExpSweep checks every float32 value (as float64) with a stride of
// 61, which covers all the softmax's arguments' exponents.
func TestExpSweep(t *testing.T) {
	needAVX512(t)
	if testing.Short() {
		t.Skip("long sweep")
	}
	x := make([]float64, 1<<16)
	b := uint64(0)
	for b < 1<<32 {
		for i := range x {
			x[i] = float64(math.Float32frombits(uint32(b)))
			b += 61
		}
		checkExp(t, x)
	}
}

func FuzzExp(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0xf0, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		if !cpuid.CPU.Supports(cpuid.AVX512F) {
			t.Skip("CPU lacks AVX-512F")
		}
		x := make([]float64, len(data)/8)
		for i := range x {
			x[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
		}
		checkExp(t, x)
	})
}

func BenchmarkExp(b *testing.B) {
	x, y := make([]float64, 4096), make([]float64, 4096)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range x {
		x[i] = -rng.ExpFloat64() * 4
	}
	b.SetBytes(8 * int64(len(x)))
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				y[i] = math.Exp(v)
			}
		}
	})
	b.Run("avx512", func(b *testing.B) {
		needAVX512(b)
		for b.Loop() {
			Exp(x, y)
		}
	})
}

// randF32 fills x with values of every kind: normal ones of every scale,
// and uniform bits (NaNs, infinities, subnormals) every third.
func randF32(rng *rand.Rand, x []float32) {
	for i := range x {
		switch i % 3 {
		case 0:
			x[i] = math.Float32frombits(rng.Uint32())
		default:
			x[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(60)-30)))
		}
	}
	for _, v := range []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.Float32frombits(1), math.Float32frombits(0x807fffff), math.MaxFloat32, 65504, 65520, 6e-8, 3e-8} {
		if len(x) > 0 {
			x[rng.IntN(len(x))] = v
		}
	}
}

func TestArith(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 100, 2048 + 7, 8192} {
		a, b, w := make([]float32, n), make([]float32, n), make([]float32, n)
		randF32(rng, a)
		randF32(rng, b)
		randF32(rng, w)
		s := float32(rng.NormFloat64())
		y := make([]float32, n+1)
		for _, op := range []string{"add", "mul", "scale", "scalew"} {
			y[n] = -9
			switch op {
			case "add":
				Add(a, b, y[:n])
			case "mul":
				Mul(a, b, y[:n])
			case "scale":
				Scale(a, s, nil, y[:n])
			default:
				Scale(a, s, w, y[:n])
			}
			for i := 0; i < n; i++ {
				var want float32
				switch op {
				case "add":
					want = a[i] + b[i]
				case "mul":
					want = a[i] * b[i]
				case "scale":
					want = a[i] * s
				default:
					want = float32(a[i]*s) * w[i]
				}
				if !same(y[i], want) {
					t.Fatalf("%s n %d [%d]: %v (%#x), Go %v (%#x)", op, n, i, y[i], math.Float32bits(y[i]), want, math.Float32bits(want))
				}
			}
			if y[n] != -9 {
				t.Fatalf("%s of %d values wrote past them", op, n)
			}
		}
	}
}

// TestF16 checks the conversion against quant.F32ToF16 on every float32
// bit pattern a stride of 7 apart (about 600 M values), NaNs compared by
// bits too: VCVTPS2PH and quant agree on them exactly.
func TestF16(t *testing.T) {
	needAVX512(t)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 15, 16, 17, 100, 1024} {
		x := make([]float32, n)
		randF32(rng, x)
		y := make([]uint16, n+1)
		y[n] = 0x1234
		F16(x, y)
		for i, v := range x {
			if y[i] != quant.F32ToF16(v) {
				t.Fatalf("f16(%#x) = %#x, quant %#x", math.Float32bits(v), y[i], quant.F32ToF16(v))
			}
		}
		if y[n] != 0x1234 {
			t.Fatal("f16 wrote past its values")
		}
	}
	stride := uint64(7)
	if testing.Short() {
		stride = 997
	}
	x, y := make([]float32, 1<<16), make([]uint16, 1<<16)
	for b := uint64(0); b < 1<<32; {
		for i := range x {
			x[i] = math.Float32frombits(uint32(b))
			b += stride
		}
		F16(x, y)
		for i, v := range x {
			if y[i] != quant.F32ToF16(v) {
				t.Fatalf("f16(%#x) = %#x, quant %#x", math.Float32bits(v), y[i], quant.F32ToF16(v))
			}
		}
	}
}

func TestElemAllocs(t *testing.T) {
	needAVX512(t)
	e, _ := cpukern.LookupElementwise()
	a, b, y := make([]float32, 4099), make([]float32, 4099), make([]float32, 4099)
	h := make([]uint16, 4099)
	xd, yd := make([]float64, 67), make([]float64, 67)
	if n := testing.AllocsPerRun(50, func() {
		e.Add(a, b, y)
		e.Mul(a, b, y)
		e.Scale(a, 0.5, b, y)
		e.Scale(a, 0.5, nil, y)
		e.F16(a, h)
		e.Exp(xd, yd)
	}); n != 0 {
		t.Fatalf("%v allocations a call", n)
	}
}

func BenchmarkArith(b *testing.B) {
	const n = 8192 * 8
	x, w, y := make([]float32, n), make([]float32, n), make([]float32, n)
	h := make([]uint16, n)
	for i := range x {
		x[i], w[i] = float32(i%97)*0.25, float32(i%13)*0.5
	}
	b.Run("mul/go", func(b *testing.B) {
		for b.Loop() {
			for i := range y {
				y[i] = x[i] * w[i]
			}
		}
	})
	b.Run("mul/avx512", func(b *testing.B) {
		for b.Loop() {
			Mul(x, w, y)
		}
	})
	b.Run("scalew/go", func(b *testing.B) {
		for b.Loop() {
			for i := range y {
				y[i] = float32(x[i]*0.3) * w[i]
			}
		}
	})
	b.Run("scalew/avx512", func(b *testing.B) {
		for b.Loop() {
			Scale(x, 0.3, w, y)
		}
	})
	b.Run("f16/go", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				h[i] = quant.F32ToF16(v)
			}
		}
	})
	b.Run("f16/avx512", func(b *testing.B) {
		for b.Loop() {
			F16(x, h)
		}
	})
}

// FuzzArith checks Add, Mul, Scale and F16 on fuzzer-chosen bits: the
// data gives a, b and the scale.
func FuzzArith(f *testing.F) {
	f.Add([]byte{0, 0, 0xc0, 0x7f, 1, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f, 0x80, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if !cpuid.CPU.Supports(cpuid.AVX512F) {
			t.Skip("CPU lacks AVX-512F")
		}
		v := make([]float32, len(data)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		if len(v) < 3 {
			return
		}
		s, n := v[0], (len(v)-1)/2
		a, b := v[1:1+n], v[1+n:1+2*n]
		y, h := make([]float32, n), make([]uint16, n)
		Add(a, b, y)
		for i := range y {
			if !same(y[i], a[i]+b[i]) {
				t.Fatalf("add %#x %#x: %#x", math.Float32bits(a[i]), math.Float32bits(b[i]), math.Float32bits(y[i]))
			}
		}
		Mul(a, b, y)
		for i := range y {
			if !same(y[i], a[i]*b[i]) {
				t.Fatalf("mul %#x %#x: %#x", math.Float32bits(a[i]), math.Float32bits(b[i]), math.Float32bits(y[i]))
			}
		}
		Scale(a, s, b, y)
		for i := range y {
			if !same(y[i], float32(a[i]*s)*b[i]) {
				t.Fatalf("scale %#x %#x %#x: %#x", math.Float32bits(a[i]), math.Float32bits(s), math.Float32bits(b[i]), math.Float32bits(y[i]))
			}
		}
		F16(a, h)
		for i := range h {
			if h[i] != quant.F32ToF16(a[i]) {
				t.Fatalf("f16 %#x: %#x", math.Float32bits(a[i]), h[i])
			}
		}
	})
}
