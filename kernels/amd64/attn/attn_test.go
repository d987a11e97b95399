//go:build amd64

package attn

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// refDot is runtime/exec's attendGroup dot loop (the main part, before the
// float64 tail), with its double-rounded FMA.
func refDot(q []float32, k []uint16) float32 {
	var l [64]float32
	for i := 0; i+64 <= len(q); i += 64 {
		for u := range l {
			l[u] = float32(math.FMA(float64(q[i+u]), float64(quant.F16ToF32(k[i+u])), float64(l[u])))
		}
	}
	for w := 32; w >= 1; w /= 2 {
		for u := 0; u < w; u++ {
			l[u] = float32(l[u] + l[u+w])
		}
	}
	return l[0]
}

// refAcc is attendGroup's rescale and value step for one row.
func refAcc(a []float32, v []uint16, vs, ms float32) {
	if ms != 1 {
		for d := range a {
			a[d] = quant.F16ToF32(quant.F32ToF16(float32(a[d] * ms)))
		}
	}
	for d := range a {
		a[d] = quant.F16ToF32(quant.F32ToF16(float32(math.FMA(float64(quant.F16ToF32(v[d])), float64(vs), float64(a[d])))))
	}
}

// same: equal bits, or both NaN (the hardware quiets signalling NaNs,
// quant.F16ToF32 keeps them).
func same(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// f16 draws a binary16: mostly normal values of moderate size, sometimes an
// extreme (zero, subnormal, the largest finite, infinity, NaN) or any bits.
func f16(r *rand.Rand, extremes bool) uint16 {
	if extremes {
		switch r.IntN(12) {
		case 0:
			return uint16(r.IntN(2)) << 15 // ±0
		case 1:
			return uint16(r.IntN(2))<<15 | uint16(1+r.IntN(0x3ff)) // subnormal
		case 2:
			return uint16(r.IntN(2))<<15 | 0x7bff // ±65504
		case 3:
			return uint16(r.IntN(2))<<15 | 0x7c00 // ±inf
		case 4:
			return uint16(r.Uint32()) // any bits, NaNs included
		}
	}
	return quant.F32ToF16(float32(r.NormFloat64() * math.Exp2(float64(r.IntN(9)-4))))
}

func kernels(t testing.TB) []cpukern.Attention {
	var l []cpukern.Attention
	for _, b := range builds {
		if b.has() {
			l = append(l, b.kernel())
		}
	}
	if len(l) == 0 {
		t.Skip("CPU has neither AVX2+F16C+FMA nor AVX-512")
	}
	return l
}

func TestRegistered(t *testing.T) {
	ks := kernels(t)
	a, ok := cpukern.LookupAttention()
	if !ok || a.ISA != ks[0].ISA {
		t.Fatalf("LookupAttention = %q, %v; want %q", a.ISA, ok, ks[0].ISA)
	}
}

func checkDot(t *testing.T, k cpukern.Attention, q []float32, kc []uint16, stride, rows int) {
	t.Helper()
	out := make([]float32, rows)
	k.Dot(q, kc, stride, out)
	for r := range out {
		if want := refDot(q, kc[r*stride:]); !same(out[r], want) {
			t.Fatalf("%s dot hd %d row %d/%d: got %v (%#x), want %v (%#x)", k.ISA, len(q), r, rows, out[r], math.Float32bits(out[r]), want, math.Float32bits(want))
		}
	}
}

func checkAcc(t *testing.T, k cpukern.Attention, a0 []float32, v []uint16, stride int, vs, ms []float32) {
	t.Helper()
	got, want := append([]float32(nil), a0...), append([]float32(nil), a0...)
	k.Accum(got, v, stride, vs, ms)
	for r := range vs {
		refAcc(want, v[r*stride:], vs[r], ms[r])
	}
	for d := range got {
		if !same(got[d], want[d]) {
			t.Fatalf("%s accum hd %d rows %d: value %d: got %v (%#x), want %v (%#x)", k.ISA, len(a0), len(vs), d, got[d], math.Float32bits(got[d]), want[d], math.Float32bits(want[d]))
		}
	}
}

// weight draws a softmax weight in [0, 1]: exp of a non-positive float32,
// sometimes exactly 0, 1, or a subnormal.
func weight(r *rand.Rand) float32 {
	switch r.IntN(10) {
	case 0:
		return 1
	case 1:
		return 0
	case 2:
		return math.Float32frombits(uint32(1 + r.IntN(1<<23)))
	}
	return float32(math.Exp(float64(float32(-r.ExpFloat64() * 4))))
}

func TestRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	for _, k := range kernels(t) {
		for _, hd := range []int{64, 128, 192, 256, 8, 16, 24, 40, 80, 96} {
			for _, extremes := range []bool{false, true} {
				rows := 1 + r.IntN(40)
				stride := hd + 8*r.IntN(4)
				kc := make([]uint16, (rows-1)*stride+hd)
				for i := range kc {
					kc[i] = f16(r, extremes)
				}
				if hd%64 == 0 {
					q := make([]float32, hd)
					for i := range q {
						q[i] = quant.F16ToF32(f16(r, extremes))
					}
					checkDot(t, k, q, kc, stride, rows)
				}
				a := make([]float32, hd)
				for i := range a {
					a[i] = quant.F16ToF32(f16(r, extremes))
				}
				vs, ms := make([]float32, rows), make([]float32, rows)
				for i := range vs {
					vs[i], ms[i] = weight(r), 1
					if r.IntN(4) == 0 {
						ms[i] = weight(r)
					}
				}
				checkAcc(t, k, a, kc, stride, vs, ms)
			}
		}
	}
}

// TestAccRoundingEdges drives the value step onto f16 ties and the f16
// range's ends: accumulators and products near half an f16 ulp, overflow to
// infinity, results in the subnormal range.
func TestAccRoundingEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range kernels(t) {
		const hd = 64
		v := make([]uint16, hd)
		a := make([]float32, hd)
		for it := 0; it < 200; it++ {
			for d := range v {
				v[d] = f16(r, true)
				a[d] = quant.F16ToF32(f16(r, true))
			}
			// vs a power of two over 2^11 makes v·vs land on f16 ties
			vs := []float32{float32(math.Exp2(-float64(r.IntN(30)))) * (1 + float32(r.IntN(3))/2048), weight(r)}
			ms := []float32{1, 0.5 + float32(r.IntN(2048))/4096}
			checkAcc(t, k, a, v, 0, vs, ms) // stride 0: the same row twice
		}
	}
}

func TestBadInput(t *testing.T) {
	for _, k := range kernels(t) {
		for name, f := range map[string]func(){
			"dot q not 64":   func() { k.Dot(make([]float32, 32), make([]uint16, 64), 64, make([]float32, 1)) },
			"dot short k":    func() { k.Dot(make([]float32, 64), make([]uint16, 127), 64, make([]float32, 2)) },
			"dot neg stride": func() { k.Dot(make([]float32, 64), make([]uint16, 128), -64, make([]float32, 2)) },
			"acc not 8":      func() { k.Accum(make([]float32, 12), make([]uint16, 64), 12, []float32{1}, []float32{1}) },
			"acc short v":    func() { k.Accum(make([]float32, 64), make([]uint16, 100), 64, []float32{1, 1}, []float32{1, 1}) },
			"acc ms len":     func() { k.Accum(make([]float32, 64), make([]uint16, 64), 64, []float32{1}, nil) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s %s: no panic", k.ISA, name)
					}
				}()
				f()
			}()
		}
	}
}

func TestNoAllocs(t *testing.T) {
	for _, k := range kernels(t) {
		q, out := make([]float32, 128), make([]float32, 16)
		kc := make([]uint16, 16*128)
		vs, ms := make([]float32, 16), make([]float32, 16)
		if n := testing.AllocsPerRun(100, func() {
			k.Dot(q, kc, 128, out)
			k.Accum(q, kc, 128, vs, ms)
		}); n != 0 {
			t.Errorf("%s: %v allocations per call", k.ISA, n)
		}
	}
}

// FuzzKernels checks both loops on fuzzer-chosen f16 bits: the data gives
// the query, key/value rows, and the weights' bits.
func FuzzKernels(f *testing.F) {
	f.Add(uint8(1), uint8(3), []byte{0x00, 0x3c, 0xff, 0x7b, 0x00, 0x7c, 0x01, 0x00})
	f.Add(uint8(2), uint8(1), []byte{0x00, 0x80, 0x01, 0x80, 0x00, 0xfc})
	f.Fuzz(func(t *testing.T, nc, rows uint8, data []byte) {
		ks := kernels(t)
		hd, n := 64*(1+int(nc)%4), 1+int(rows)%16
		word := func(i int) uint16 {
			if len(data) < 2 {
				return 0
			}
			j := (2 * i) % (len(data) - len(data)%2)
			return binary.LittleEndian.Uint16(data[j:])
		}
		q := make([]float32, hd)
		for i := range q {
			q[i] = quant.F16ToF32(word(i + 7))
		}
		kc := make([]uint16, n*hd)
		for i := range kc {
			kc[i] = word(i)
		}
		vs, ms := make([]float32, n), make([]float32, n)
		for i := range vs {
			vs[i] = math.Float32frombits(uint32(word(3*i)) << 14 & 0x3fffffff) // [0, 2)
			ms[i] = 1
			if word(5*i)&3 == 0 {
				ms[i] = math.Float32frombits(uint32(word(5*i+1)) << 13 & 0x3fffffff)
			}
		}
		for _, k := range ks {
			checkDot(t, k, q, kc, hd, n)
			checkAcc(t, k, q, kc, hd, vs, ms)
		}
	})
}

// The benchmarks run one head of 64 values against 64 cached rows 512
// values apart (8 KV heads), each build.
func BenchmarkDot(b *testing.B) {
	q, out := make([]float32, 64), make([]float32, 64)
	kc := make([]uint16, 64*512)
	for _, k := range kernels(b) {
		b.Run(k.ISA, func(b *testing.B) {
			for b.Loop() {
				k.Dot(q, kc, 512, out)
			}
		})
	}
}

func BenchmarkAccum(b *testing.B) {
	vs, ms := make([]float32, 64), make([]float32, 64)
	for i := range ms {
		vs[i], ms[i] = 0.5, 1
	}
	v := make([]uint16, 64*512)
	for _, hd := range []int{64, 128} { // 64 rows of a 64- and a 128-value head
		a := make([]float32, hd)
		for _, k := range kernels(b) {
			b.Run(fmt.Sprintf("hd%d/%s", hd, k.ISA), func(b *testing.B) {
				for b.Loop() {
					k.Accum(a, v, 512, vs, ms)
				}
			})
		}
	}
}
