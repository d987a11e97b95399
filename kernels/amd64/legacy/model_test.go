package legacy

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/quant"
)

// The orders again, written plainly with the FMA as a parameter: with
// fmaTwice (float64 FMA then float32, what kernels/cpugen and
// kernels/quant's x86 variants compute) they reproduce cpugen bit for bit;
// with fma32 (rounded once, what VFMADD and so ggml compute) they are what
// the native kernels must return. The two differ only where a product lies
// on a float32 midpoint and the addend is too small for float64 to keep.

type fmaFunc func(a, b, c float32) float32

func fmaTwice(a, b, c float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

func hsum8(v [8]float32) float32 {
	r := [4]float32{v[4] + v[0], v[5] + v[1], v[6] + v[2], v[7] + v[3]}
	return (r[0] + r[2]) + (r[1] + r[3])
}

func reduce16(v [16]float32) float32 {
	var h [8]float32
	for i := range h {
		h[i] = v[i] + v[i+8]
	}
	return hsum8(h)
}

func f16at(b []byte, o int) float32 { return quant.F16ToF32(binary.LittleEndian.Uint16(b[o:])) }
func f32at(b []byte, o int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[o:])) }

// q0Quant is weight quant k (0..31) of a Q8_0 or Q4_0 block.
func q0Quant(a []byte, q8 bool, k int) int32 {
	if q8 {
		return int32(int8(a[2+k]))
	}
	if k < 16 {
		return int32(a[2+k]&15) - 8
	}
	return int32(a[2+k-16]>>4) - 8
}

func modelQ0AVX2(fma fmaFunc, q8 bool) func(n int, w, x []byte) float32 {
	wb := 18
	if q8 {
		wb = 34
	}
	return func(n int, w, x []byte) float32 {
		var acc [8]float32
		for b := 0; b < n/32; b++ {
			a, y := w[b*wb:], x[b*34:]
			d := f16at(a, 0) * f16at(y, 0)
			for l := range acc {
				var s int32
				for k := 4 * l; k < 4*l+4; k++ {
					s += q0Quant(a, q8, k) * int32(int8(y[2+k]))
				}
				acc[l] = fma(float32(s), d, acc[l])
			}
		}
		return 0 + hsum8(acc)
	}
}

func modelRepack(fma fmaFunc) func(n int, w, x []byte) float32 {
	return func(n int, w, x []byte) float32 {
		var acc float32
		for b := 0; b < n/32; b++ {
			a, y := w[b*18:], x[b*34:]
			var s int32
			for k := 0; k < 32; k++ {
				s += q0Quant(a, false, k) * int32(int8(y[2+k]))
			}
			acc = fma(float32(s), f16at(a, 0)*f16at(y, 0), acc)
		}
		return acc
	}
}

// modelFloat is the AVX512 (groups 4) or tinyBLAS (groups 1) float order.
func modelFloat(fma fmaFunc, f16 bool, groups int) func(n int, w, x []byte) float32 {
	at := func(b []byte, i int) float32 {
		if f16 {
			return f16at(b, 2*i)
		}
		return f32at(b, 4*i)
	}
	return func(n int, w, x []byte) float32 {
		chunk := 16 * groups
		np := n / chunk * chunk
		acc := make([][16]float32, groups)
		for i := 0; i < np; i += chunk {
			for g := range acc {
				for l := 0; l < 16; l++ {
					o := i + 16*g + l
					acc[g][l] = fma(at(w, o), at(x, o), acc[g][l])
				}
			}
		}
		v := acc[0]
		if groups == 4 {
			for l := range v {
				v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l])
			}
		}
		r := reduce16(v)
		if f16 {
			sum := 0 + float64(r)
			for i := np; i < n; i++ {
				sum += float64(at(w, i) * at(x, i))
			}
			return float32(sum)
		}
		sum := 0 + r
		for i := np; i < n; i++ {
			sum = fma(at(w, i), at(x, i), sum)
		}
		return sum
	}
}

// model returns an order's model under fma.
func model(order string, fma fmaFunc) func(n int, w, x []byte) float32 {
	switch order {
	case "DotQ8_0AVX2":
		return modelQ0AVX2(fma, true)
	case "DotQ4_0AVX2":
		return modelQ0AVX2(fma, false)
	case "DotQ4_0Repack8x8":
		return modelRepack(fma)
	case "DotF32AVX512":
		return modelFloat(fma, false, 4)
	case "DotF32TinyBLAS":
		return modelFloat(fma, false, 1)
	case "DotF16AVX512":
		return modelFloat(fma, true, 4)
	case "DotF16TinyBLAS":
		return modelFloat(fma, true, 1)
	case "DotMXFP4AVX2":
		return DotMXFP4AVX2 // rounds once already; no cpugen twin
	}
	panic("no model for " + order)
}

var cpugenOf = map[string]func(int, []byte, []byte) float32{
	"DotQ8_0AVX2":      cpugen.DotQ8_0AVX2,
	"DotQ4_0AVX2":      cpugen.DotQ4_0AVX2,
	"DotQ4_0Repack8x8": cpugen.DotQ4_0Repack8x8,
	"DotF32AVX512":     cpugen.DotF32AVX512,
	"DotF32TinyBLAS":   cpugen.DotF32TinyBLAS,
	"DotF16AVX512":     cpugen.DotF16AVX512,
	"DotF16TinyBLAS":   cpugen.DotF16TinyBLAS,
}

func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// TestModelsMatchCpugen checks the double-rounding models against cpugen on
// random bytes (so the once-rounded models are the same orders).
func TestModelsMatchCpugen(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	sizes := map[string][2]int{ // weight, activation bytes per 32 values
		"DotQ8_0AVX2": {34, 34}, "DotQ4_0AVX2": {18, 34}, "DotQ4_0Repack8x8": {18, 34},
		"DotF32AVX512": {128, 128}, "DotF32TinyBLAS": {128, 128}, "DotF16AVX512": {64, 64}, "DotF16TinyBLAS": {64, 64},
	}
	for order, ref := range cpugenOf {
		m := model(order, fmaTwice)
		for _, n := range []int{0, 1, 17, 32, 64, 65, 96, 130, 2048, 2051} {
			if sizes[order][0] != 128 && sizes[order][0] != 64 {
				n = n / 32 * 32
			}
			for trial := 0; trial < 20; trial++ {
				w, x := make([]byte, (n+31)/32*sizes[order][0]), make([]byte, (n+31)/32*sizes[order][1])
				for i := range w {
					w[i] = byte(r.Uint32())
				}
				for i := range x {
					x[i] = byte(r.Uint32())
				}
				if got, want := m(n, w, x), ref(n, w, x); !sameBits(got, want) {
					t.Fatalf("%s n=%d: model %#08x, cpugen %#08x", order, n, math.Float32bits(got), math.Float32bits(want))
				}
			}
		}
	}
}

// TestFMA32 checks the once-rounded FMA on the case that breaks the float64
// route: a product on a float32 midpoint plus a tiny addend.
func TestFMA32(t *testing.T) {
	a, b := float32(0x1.262dp+23), float32(-1332)
	tiny := float32(-0x1p-24) // below float64's half ulp at 2^33
	if p := float64(a) * float64(b); float64(float32(p)) == p {
		t.Fatalf("test product %v is representable; it should be a midpoint", p)
	}
	once, twice := fma32(a, b, tiny), fmaTwice(a, b, tiny)
	if once == twice {
		t.Fatalf("fma32 = fmaTwice = %x: expected the tie-break to differ", once)
	}
	// the exact value is below the midpoint (more negative): rounds away from zero
	lo := math.Nextafter32(twice, float32(math.Inf(-1)))
	if once != lo {
		t.Fatalf("fma32 = %x, want %x", once, lo)
	}
	r := rand.New(rand.NewPCG(15, 16))
	for i := 0; i < 100000; i++ {
		x, y, z := float32(r.NormFloat64()), float32(r.NormFloat64()), float32(r.NormFloat64()*math.Pow(2, float64(r.IntN(80)-40)))
		// when float64 holds the exact sum, both routes round once
		if p := float64(float64(x)*float64(y)) + float64(z); p-float64(float64(x)*float64(y)) == float64(z) {
			if fma32(x, y, z) != fmaTwice(x, y, z) {
				t.Fatalf("fma32(%v, %v, %v) = %v, float64 route %v", x, y, z, fma32(x, y, z), fmaTwice(x, y, z))
			}
		}
	}
}
