//go:build amd64

package attn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// refDotQ8 is cpugen.AttentionSeqQ8_0's dot of one position: per block the
// exact integer sum, then dot += (qd·ks)·isum in float32, blocks in order.
func refDotQ8(qq []byte, qd []float32, kq []byte, ks []uint16) float32 {
	dot := float32(0)
	for c := range len(qq) / 32 {
		isum := int32(0)
		for i := 32 * c; i < 32*c+32; i++ {
			isum += int32(int8(qq[i])) * int32(int8(kq[i]))
		}
		dd := float32(qd[c] * quant.F16ToF32(ks[c]))
		dot = float32(dot + float32(dd*float32(isum)))
	}
	return dot
}

// refAccQ8 is AttentionSeqQ8_0's rescale and value step for one row.
func refAccQ8(a []float32, vq []byte, vd []uint16, w, ms float32) {
	if ms != 1 {
		for d := range a {
			a[d] = float32(a[d] * ms)
		}
	}
	for d := range a {
		a[d] = quant.FMA32(float32(float32(int8(vq[d]))*quant.F16ToF32(vd[d/32])), w, a[d])
	}
}

func kernelsQ8(t testing.TB) []cpukern.AttentionQ8 {
	var l []cpukern.AttentionQ8
	for _, b := range buildsQ8 {
		if b.has() {
			l = append(l, b.kernel())
		}
	}
	if len(l) == 0 {
		t.Skip("CPU has neither AVX2+F16C+FMA nor AVX-512 VNNI")
	}
	return l
}

func TestRegisteredQ8(t *testing.T) {
	ks := kernelsQ8(t)
	a, ok := cpukern.LookupAttentionQ8()
	if !ok || a.ISA != ks[0].ISA {
		t.Fatalf("LookupAttentionQ8 = %q, %v; want %q", a.ISA, ok, ks[0].ISA)
	}
}

// quants draws int8 quants: mostly what QuantizeQ8_0 makes (|q| ≤ 127),
// with extremes -128 and ±127 and any byte.
func quants(r *rand.Rand, b []byte, extremes bool) {
	for i := range b {
		b[i] = byte(int8(r.NormFloat64() * 40))
		if extremes {
			switch r.IntN(8) {
			case 0:
				b[i] = 0x80 // -128
			case 1:
				b[i] = 0x7f
			case 2:
				b[i] = 0x81 // -127
			case 3:
				b[i] = byte(r.Uint32())
			}
		}
	}
}

func checkDotQ8(t *testing.T, k cpukern.AttentionQ8, qq []byte, qd []float32, kq []byte, ks []uint16, stride, rows int) {
	t.Helper()
	out := make([]float32, rows)
	for i := range out {
		out[i] = float32(math.NaN()) // every row must be written
	}
	k.Dot(qq, qd, kq, ks, stride, out)
	for r := range out {
		if want := refDotQ8(qq, qd, kq[r*stride:], ks[r*stride/32:]); !same(out[r], want) {
			t.Fatalf("%s q8 dot hd %d stride %d row %d/%d: got %v (%#x), want %v (%#x)", k.ISA, len(qq), stride, r, rows, out[r], math.Float32bits(out[r]), want, math.Float32bits(want))
		}
	}
}

func checkAccQ8(t *testing.T, k cpukern.AttentionQ8, a0 []float32, vq []byte, vd []uint16, stride int, w, ms []float32) {
	t.Helper()
	got, want := append([]float32(nil), a0...), append([]float32(nil), a0...)
	k.Accum(got, vq, vd, stride, w, ms)
	for r := range w {
		refAccQ8(want, vq[r*stride:], vd[r*stride/32:], w[r], ms[r])
	}
	for d := range got {
		if !same(got[d], want[d]) {
			t.Fatalf("%s q8 accum hd %d stride %d rows %d: value %d: got %v (%#x), want %v (%#x)", k.ISA, len(a0), stride, len(w), d, got[d], math.Float32bits(got[d]), want[d], math.Float32bits(want[d]))
		}
	}
}

// TestRandomQ8 runs both loops on random caches of several head sizes
// (odd block counts included), row counts across the 8- and 16-row passes
// and their one-row tails, strides with other heads between rows (and 0),
// with and without extreme quants and scales.
func TestRandomQ8(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, k := range kernelsQ8(t) {
		for _, hd := range []int{64, 128, 96, 160, 192, 256, 32, 1024} {
			for _, extremes := range []bool{false, true} {
				for _, rows := range []int{0, 1, 7, 8, 15, 16, 17, 31, 33, 64, 1 + r.IntN(70)} {
					stride := hd + 32*r.IntN(4)
					if r.IntN(8) == 0 {
						stride = 0
					}
					n := hd
					if rows > 0 {
						n = (rows-1)*stride + hd
					}
					kq, ks := make([]byte, n), make([]uint16, n/32)
					quants(r, kq, extremes)
					for i := range ks {
						ks[i] = f16(r, extremes)
					}
					if hd >= 64 {
						qq, qd := make([]byte, hd), make([]float32, hd/32)
						quants(r, qq, extremes)
						for i := range qd {
							qd[i] = quant.F16ToF32(f16(r, extremes))
						}
						checkDotQ8(t, k, qq, qd, kq, ks, stride, rows)
					}
					a := make([]float32, hd)
					for i := range a {
						a[i] = float32(r.NormFloat64() * 4)
						if extremes && r.IntN(10) == 0 {
							a[i] = quant.F16ToF32(f16(r, true))
						}
					}
					w, ms := make([]float32, rows), make([]float32, rows)
					for i := range w {
						w[i], ms[i] = weight(r), 1
						if r.IntN(4) == 0 {
							ms[i] = weight(r)
						}
					}
					checkAccQ8(t, k, a, kq, ks, stride, w, ms)
				}
			}
		}
	}
}

// TestAccQ8RoundingEdges puts the value step's fma on float32 ties and
// into the subnormal range: tiny scales and weights, accumulators an ulp
// apart from the products.
func TestAccQ8RoundingEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for _, k := range kernelsQ8(t) {
		const hd = 64
		vq, vd := make([]byte, hd), make([]uint16, hd/32)
		a := make([]float32, hd)
		for it := 0; it < 300; it++ {
			quants(r, vq, true)
			for i := range vd {
				vd[i] = f16(r, true)
				if r.IntN(2) == 0 {
					vd[i] = uint16(1 + r.IntN(0x3ff)) // subnormal scales: products near 2^-24
				}
			}
			for d := range a {
				a[d] = math.Float32frombits(uint32(r.IntN(1<<24)) | uint32(r.IntN(2))<<31) // tiny, subnormal
				if r.IntN(3) == 0 {
					a[d] = float32(r.NormFloat64())
				}
			}
			w := []float32{float32(math.Exp2(-float64(r.IntN(40)))) * (1 + float32(r.IntN(1<<12))/(1<<23)), weight(r)}
			ms := []float32{1, 0.5 + float32(r.IntN(2048))/4096}
			checkAccQ8(t, k, a, vq, vd, 0, w, ms) // stride 0: the same row twice
		}
	}
}

func TestBadInputQ8(t *testing.T) {
	for _, k := range kernelsQ8(t) {
		qq, qd := make([]byte, 64), make([]float32, 2)
		for name, f := range map[string]func(){
			"dot q not 32": func() {
				k.Dot(make([]byte, 80), make([]float32, 3), make([]byte, 80), make([]uint16, 3), 96, make([]float32, 1))
			},
			"dot q 32": func() { k.Dot(make([]byte, 32), qd, make([]byte, 64), make([]uint16, 2), 32, make([]float32, 1)) },
			"dot q too long": func() {
				k.Dot(make([]byte, 2048), make([]float32, 64), make([]byte, 2048), make([]uint16, 64), 2048, make([]float32, 1))
			},
			"dot short qd":   func() { k.Dot(qq, qd[:1], make([]byte, 64), make([]uint16, 2), 64, make([]float32, 1)) },
			"dot short k":    func() { k.Dot(qq, qd, make([]byte, 127), make([]uint16, 4), 64, make([]float32, 2)) },
			"dot short ks":   func() { k.Dot(qq, qd, make([]byte, 128), make([]uint16, 3), 64, make([]float32, 2)) },
			"dot stride 48":  func() { k.Dot(qq, qd, make([]byte, 256), make([]uint16, 8), 48, make([]float32, 2)) },
			"dot neg stride": func() { k.Dot(qq, qd, make([]byte, 128), make([]uint16, 4), -64, make([]float32, 2)) },
			"acc not 32": func() {
				k.Accum(make([]float32, 48), make([]byte, 64), make([]uint16, 2), 64, []float32{1}, []float32{1})
			},
			"acc short v": func() {
				k.Accum(make([]float32, 64), make([]byte, 100), make([]uint16, 4), 64, []float32{1, 1}, []float32{1, 1})
			},
			"acc short vd": func() {
				k.Accum(make([]float32, 64), make([]byte, 128), make([]uint16, 3), 64, []float32{1, 1}, []float32{1, 1})
			},
			"acc ms len": func() { k.Accum(make([]float32, 64), make([]byte, 64), make([]uint16, 2), 64, []float32{1}, nil) },
			"acc stride 16": func() {
				k.Accum(make([]float32, 32), make([]byte, 64), make([]uint16, 2), 16, []float32{1, 1}, []float32{1, 1})
			},
			"acc neg stride ": func() {
				k.Accum(make([]float32, 32), make([]byte, 64), make([]uint16, 2), -32, []float32{1, 1}, []float32{1, 1})
			},
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

func TestNoAllocsQ8(t *testing.T) {
	for _, k := range kernelsQ8(t) {
		qq, qd, out := make([]byte, 128), make([]float32, 4), make([]float32, 20)
		kq, ks := make([]byte, 20*128), make([]uint16, 20*4)
		a, w, ms := make([]float32, 128), make([]float32, 20), make([]float32, 20)
		if n := testing.AllocsPerRun(100, func() {
			k.Dot(qq, qd, kq, ks, 128, out)
			k.Accum(a, kq, ks, 128, w, ms)
		}); n != 0 {
			t.Errorf("%s: %v allocations per call", k.ISA, n)
		}
	}
}

// The benchmarks run one head against 64 cached rows 512 values apart (8
// KV heads of 64, or 4 of 128), each build.
func BenchmarkDotQ8(b *testing.B) {
	kq, ks, out := make([]byte, 64*512), make([]uint16, 64*16), make([]float32, 64)
	for _, hd := range []int{64, 128} {
		qq, qd := make([]byte, hd), make([]float32, hd/32)
		for _, k := range kernelsQ8(b) {
			b.Run(fmt.Sprintf("hd%d/%s", hd, k.ISA), func(b *testing.B) {
				for b.Loop() {
					k.Dot(qq, qd, kq, ks, 512, out)
				}
			})
		}
	}
}

func BenchmarkAccumQ8(b *testing.B) {
	w, ms := make([]float32, 64), make([]float32, 64)
	for i := range ms {
		w[i], ms[i] = 0.5, 1
	}
	vq, vd := make([]byte, 64*512), make([]uint16, 64*16)
	for _, hd := range []int{64, 128} {
		a := make([]float32, hd)
		for _, k := range kernelsQ8(b) {
			b.Run(fmt.Sprintf("hd%d/%s", hd, k.ISA), func(b *testing.B) {
				for b.Loop() {
					k.Accum(a, vq, vd, 512, w, ms)
				}
			})
		}
	}
}
