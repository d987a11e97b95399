package neon

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

type dotFn = func(n int, w, x []byte) float32

// orders are the cpugen orders this package implements: the weight block,
// the activation type and its block size.
var orders = []struct {
	name   string
	blk    ops.BlockDecode
	xt     quant.Type
	qk, xb int
}{
	{"DotQ8_0AVX2", ops.Q8_0, quant.Q8_0, q80QK, q80Bytes},
	{"DotQ4_KRepack8x8", ops.Q4_K, quant.Q8_K, qk, q8kBytes},
	{"DotQ4_KAVX2", ops.Q4_K, quant.Q8_K, qk, q8kBytes},
	{"DotQ6_KAVX2", ops.Q6_K, quant.Q8_K, qk, q8kBytes},
}

func reference(t testing.TB, order string) dotFn {
	f, ok := cpugen.Funcs[order].(dotFn)
	if !ok {
		t.Fatalf("cpugen has no row dot %s (run go generate ./kernels/cpugen)", order)
	}
	return f
}

// registered is this package's kernels for an order (the "neon" and
// "dotprod" builds the CPU has).
func registered(t testing.TB, order string) []cpukern.Kernel {
	var ks []cpukern.Kernel
	for _, k := range cpukern.All(order) {
		if k.ISA == "neon" || k.ISA == "dotprod" {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		t.Skipf("no NEON %s: %s/%s or the CPU lacks ASIMD", order, runtime.GOOS, runtime.GOARCH)
	}
	return ks
}

// sameBits is == on float bits; NaNs match any NaN (payloads are the
// hardware's choice, not part of the orders).
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

func agree(t testing.TB, order string, n int, w, x []byte, got float32, what string) {
	t.Helper()
	if want := reference(t, order)(n, w, x); !sameBits(got, want) {
		t.Fatalf("%s %s n=%d: %v (%#08x), cpugen %v (%#08x)", order, what, n,
			got, math.Float32bits(got), want, math.Float32bits(want))
	}
}

// extreme f16 scales: ±65504, the least subnormal, -2^-14, 1, ±0, ±Inf, NaN.
var f16s = []uint16{0x7bff, 0xfbff, 0x0001, 0x8400, 0x3c00, 0, 0x8000, 0x7c00, 0xfc00, 0x7e01}

// weights is nb random blocks of d; every third is extreme: saturated or
// zero bytes (-128 quants, all-ones nibbles and scales) and extreme scales.
func weights(d ops.BlockDecode, nb int, r *rand.Rand) []byte {
	w := opstest.Blocks(d, nb, r)
	for i := 2; i < nb; i += 3 {
		b := w[i*d.Bytes : (i+1)*d.Bytes]
		fill := []byte{0xff, 0x00, 0x80, 0x7f}[r.IntN(4)]
		for j := range b {
			b[j] = []byte{fill, byte(r.Uint32())}[r.IntN(2)]
		}
		for _, off := range d.F16 {
			binary.LittleEndian.PutUint16(b[off:], f16s[r.IntN(len(f16s))])
		}
	}
	return w
}

// activations is a row quantized as the matmul does, with some blocks
// replaced by raw extremes: quants of ±127 and -128 (which the quantizers
// never write, but the bytes allow), any scale; Q8_K bsums kept consistent.
func activations(t quant.Type, n int, r *rand.Rand) []byte {
	scale := []float32{1, 1e-3, 1e3, 1e-30, 3e30}[r.IntN(5)]
	x := opstest.Row(t, n, opstest.Floats(n, scale, r), r)
	bq, bb := q80QK, q80Bytes
	if t == quant.Q8_K {
		bq, bb = qk, q8kBytes
	}
	for i := 0; i < n/bq; i++ {
		if r.IntN(3) != 0 {
			continue
		}
		b := x[i*bb : (i+1)*bb]
		qs := 2
		if t == quant.Q8_K {
			qs = 4
			d := []float32{float32(r.NormFloat64()), 1e-20, 1e20, 1e-40, 0, float32(math.Inf(-1))}[r.IntN(6)]
			binary.LittleEndian.PutUint32(b, math.Float32bits(d))
		} else {
			binary.LittleEndian.PutUint16(b, f16s[r.IntN(len(f16s))])
		}
		fill := []byte{0x80, 0x7f, 0x81, 0}[r.IntN(4)]
		for j := qs; j < qs+bq; j++ {
			b[j] = []byte{fill, byte(r.Uint32())}[r.IntN(2)]
		}
		if t == quant.Q8_K {
			fixBsums(b)
		}
	}
	return x
}

func fixBsums(b []byte) {
	for g := 0; g < 16; g++ {
		var s int32
		for _, v := range b[4+16*g : 20+16*g] {
			s += int32(int8(v))
		}
		binary.LittleEndian.PutUint16(b[260+2*g:], uint16(int16(s)))
	}
}

// blockCounts are the row lengths tested, in blocks: one, odd, a
// typical hidden size (2048 values of Q8_0 is 64 blocks) and more.
var blockCounts = []int{1, 2, 3, 5, 8, 17, 64, 129}

func TestDotMatchesCpugen(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			t.Run(o.name+"/"+k.ISA, func(t *testing.T) {
				r := rand.New(rand.NewPCG(1, uint64(len(o.name))))
				for _, nb := range blockCounts {
					n := nb * o.qk
					for rep := 0; rep < 10; rep++ {
						w, x := weights(o.blk, nb, r), activations(o.xt, n, r)
						agree(t, o.name, n, w, x, k.Dot(n, w, x), fmt.Sprintf("rep %d", rep))
					}
				}
				if got := k.Dot(0, nil, nil); math.Float32bits(got) != 0 {
					t.Errorf("n=0: %v", got)
				}
			})
		}
	}
}

// TestEdgeBlocks: whole rows of one extreme: zero blocks and scales (±0
// products), every quant -128 or 127, the scales ±65504, subnormal, ±0,
// ±Inf and NaN, activation scales subnormal and huge (f16 overflow for
// Q8_0's).
func TestEdgeBlocks(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			t.Run(o.name+"/"+k.ISA, func(t *testing.T) {
				const nb = 4
				n := nb * o.qk
				for _, wb := range []byte{0x00, 0x80, 0x7f, 0xff, 0x11} {
					for _, ws := range f16s {
						for _, xb := range []byte{0x00, 0x80, 0x7f} {
							for _, xs := range []float32{0, -0.0, 1e-45, 1.5e-39, 3e38, -1} {
								w := make([]byte, nb*o.blk.Bytes)
								for i := range w {
									w[i] = wb
								}
								for i := 0; i < nb; i++ {
									for _, off := range o.blk.F16 {
										binary.LittleEndian.PutUint16(w[i*o.blk.Bytes+off:], ws)
									}
								}
								x := make([]byte, nb*o.xb)
								for i := 0; i < nb; i++ {
									b := x[i*o.xb : (i+1)*o.xb]
									if o.xt == quant.Q8_K {
										binary.LittleEndian.PutUint32(b, math.Float32bits(-xs))
										for j := 4; j < 260; j++ {
											b[j] = xb
										}
										fixBsums(b)
									} else {
										binary.LittleEndian.PutUint16(b, quant.F32ToF16(xs))
										for j := 2; j < 34; j++ {
											b[j] = xb
										}
									}
								}
								agree(t, o.name, n, w, x, k.Dot(n, w, x), fmt.Sprintf("w %#x/%#x x %#x/%g", wb, ws, xb, xs))
							}
						}
					}
				}
			})
		}
	}
}

// TestRowsMatchesCpugen holds every element of Rows to cpugen over odd row
// counts, padded strides and prefetch distances (none changes a result),
// and checks nothing is written outside out (a NaN sentinel around it).
func TestRowsMatchesCpugen(t *testing.T) {
	sentinel := math.Float32frombits(0x7fc0dead)
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			t.Run(o.name+"/"+k.ISA, func(t *testing.T) {
				r := rand.New(rand.NewPCG(3, uint64(len(o.name))))
				for _, nb := range []int{1, 3, 8, 64} {
					for _, rows := range []int{1, 2, 3, 7, 8, 13} {
						for _, pad := range []int{0, 1, o.blk.Bytes + 5} {
							n := nb * o.qk
							wstride := nb*o.blk.Bytes + pad
							w := make([]byte, rows*wstride)
							for i := range w {
								w[i] = byte(r.Uint32())
							}
							for j := 0; j < rows; j++ {
								copy(w[j*wstride:], weights(o.blk, nb, r))
							}
							w = w[:(rows-1)*wstride+nb*o.blk.Bytes] // the last row's padding is not needed
							x := activations(o.xt, n, r)
							buf := make([]float32, rows+4)
							for i := range buf {
								buf[i] = sentinel
							}
							pf := []int{0, 64, cpukern.DefaultPrefetch, 8192}[r.IntN(4)]
							k.Rows(n, w, wstride, x, buf[2:2+rows], pf)
							for i, v := range buf {
								if i < 2 || i >= 2+rows {
									if math.Float32bits(v) != math.Float32bits(sentinel) {
										t.Fatalf("nb=%d rows=%d: wrote %v at %d outside out", nb, rows, v, i-2)
									}
									continue
								}
								j := i - 2
								agree(t, o.name, n, w[j*wstride:], x, v, fmt.Sprintf("rows=%d row %d pad %d pf %d", rows, j, pad, pf))
							}
						}
					}
				}
				k.Rows(o.qk, nil, 0, nil, nil, 0) // no rows: nothing read
			})
		}
	}
}

// TestShortRowsPanic: rows too short for n, an n that is not whole blocks
// and a stride below a row panic with a message, as cpugen's bounds checks
// do, instead of reading past the slices.
func TestShortRowsPanic(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			n := 2 * o.qk
			w, x := make([]byte, 2*o.blk.Bytes), make([]byte, 2*o.xb)
			out := make([]float32, 2)
			for _, c := range []struct {
				what string
				f    func()
			}{
				{"short w", func() { k.Dot(n, w[:len(w)-1], x) }},
				{"short x", func() { k.Dot(n, w, x[:len(x)-1]) }},
				{"partial block", func() { k.Dot(n+1, w, x) }},
				{"negative n", func() { k.Dot(-o.qk, w, x) }},
				{"rows: small stride", func() { k.Rows(n, append(w, w...), len(w)-1, x, out, 0) }},
				{"rows: short w", func() { k.Rows(n, append(w, w[1:]...), len(w), x, out, 0) }},
				{"rows: short x", func() { k.Rows(n, append(w, w...), len(w), x[:1], out, 0) }},
			} {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s/%s %s: no panic", o.name, k.ISA, c.what)
						}
					}()
					c.f()
				}()
			}
		}
	}
}

func TestNoAllocations(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			n := 8 * o.qk
			w, x := make([]byte, 2*8*o.blk.Bytes), make([]byte, 8*o.xb)
			out := make([]float32, 2)
			if a := testing.AllocsPerRun(50, func() { k.Dot(n, w, x) }); a != 0 {
				t.Errorf("%s/%s Dot: %v allocations a call", o.name, k.ISA, a)
			}
			if a := testing.AllocsPerRun(50, func() { k.Rows(n, w, len(w)/2, x, out, cpukern.DefaultPrefetch) }); a != 0 {
				t.Errorf("%s/%s Rows: %v allocations a call", o.name, k.ISA, a)
			}
		}
	}
}

func FuzzDotQ8_0AVX2(f *testing.F)      { fuzzDot(f, 0) }
func FuzzDotQ4_KRepack8x8(f *testing.F) { fuzzDot(f, 1) }
func FuzzDotQ4_KAVX2(f *testing.F)      { fuzzDot(f, 2) }
func FuzzDotQ6_KAVX2(f *testing.F)      { fuzzDot(f, 3) }

// fuzzDot: any weight and activation bytes (NaN and Inf scales included;
// Q8_K bsums left as the fuzzer wrote them, which the mins sums must take
// exactly too), and a second weight row for Rows.
func fuzzDot(f *testing.F, which int) {
	o := orders[which]
	f.Add([]byte{1, 2, 3}, uint64(1))
	f.Add(make([]byte, 64), uint64(7))
	f.Add([]byte{0x00, 0x7c, 0x80, 0x80, 0x80}, uint64(3))
	f.Fuzz(func(t *testing.T, seed []byte, s uint64) {
		ks := registered(t, o.name)
		r := rand.New(rand.NewPCG(s, uint64(len(seed))))
		nb := 1 + int(s%7)
		w := make([]byte, 2*nb*o.blk.Bytes)
		x := make([]byte, nb*o.xb)
		for i := range w {
			w[i] = byte(r.Uint32())
		}
		for i := range x {
			x[i] = byte(r.Uint32())
		}
		copy(w, seed)
		if len(seed) > len(w) {
			copy(x, seed[len(w):])
		}
		n, rb := nb*o.qk, nb*o.blk.Bytes
		for _, k := range ks {
			agree(t, o.name, n, w, x, k.Dot(n, w, x), k.ISA)
			var out [2]float32
			k.Rows(n, w, rb, x, out[:], int(s%4096))
			for j := range out {
				agree(t, o.name, n, w[j*rb:], x, out[j], fmt.Sprintf("%s rows[%d]", k.ISA, j))
			}
		}
	})
}

// BenchmarkRows is the decode kernels on 64 weight rows in cache and on
// 32768 rows out of it. Under qemu these numbers measure the emulator, not
// a CPU: only a real arm64 host says anything about speed.
func BenchmarkRows(b *testing.B) {
	for _, o := range orders {
		for _, k := range registered(b, o.name) {
			for _, c := range []struct{ n, rows int }{{2048, 64}, {2048, 1 << 15}} {
				nb := c.n / o.qk
				r := rand.New(rand.NewPCG(4, 4))
				w := opstest.Blocks(o.blk, nb*c.rows, r)
				x := activations(o.xt, c.n, r)
				out := make([]float32, c.rows)
				b.Run(fmt.Sprintf("%s/n=%d/rows=%d/%s", o.name, c.n, c.rows, k.ISA), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					for b.Loop() {
						k.Rows(c.n, w, nb*o.blk.Bytes, x, out, cpukern.DefaultPrefetch)
					}
				})
			}
		}
	}
}
