package kquant

import (
	"bytes"
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

// orders are the cpugen orders this package implements, with their weight
// block decode.
var orders = []struct {
	name string
	blk  ops.BlockDecode
}{
	{"DotQ4_KAVX2", ops.Q4_K},
	{"DotQ5_KAVX2", ops.Q5_K},
	{"DotQ6_KAVX2", ops.Q6_K},
	{"DotQ4_KRepack8x8", ops.Q4_K},
}

func reference(t testing.TB, order string) dotFn {
	f, ok := cpugen.Funcs[order].(dotFn)
	if !ok {
		t.Fatalf("cpugen has no row dot %s (run go generate ./kernels/cpugen)", order)
	}
	return f
}

func registered(t testing.TB, order string) []cpukern.Kernel {
	ks := cpukern.All(order)
	if len(ks) == 0 {
		t.Skipf("no native %s: %s/%s or the CPU lacks AVX2+FMA+F16C", order, runtime.GOOS, runtime.GOARCH)
	}
	return ks
}

// agree checks a native result against cpugen's bit for bit. The one
// excuse is cpugen's own: its FMA is float32(math.FMA(...)), which rounds
// twice and misses a float32 tie once in a great while (an addend 2^29 times
// smaller than the product, as extreme scales give); the hardware's VFMADD
// rounds once. There the result must instead be the opstest reference of
// the order, whose FMA rounds once, and cpugen must be the one that differs
// from it.
func agree(t testing.TB, order string, n int, w, x []byte, got float32, what string) {
	t.Helper()
	want := reference(t, order)(n, w, x)
	if sameBits(got, want) {
		return
	}
	exact := opstest.Variants[order](n, w, x)
	if sameBits(got, exact) && !sameBits(want, exact) {
		t.Logf("%s %s: %#x; cpugen %#x double-rounds an FMA (once-rounded reference %#x)", order, what,
			math.Float32bits(got), math.Float32bits(want), math.Float32bits(exact))
		return
	}
	t.Fatalf("%s %s n=%d: %v (%#x), cpugen %v (%#x), once-rounded reference %#x", order, what, n,
		got, math.Float32bits(got), want, math.Float32bits(want), math.Float32bits(exact))
}

// sameBits is == on float bits; NaNs match any NaN (their payloads are the
// hardware's choice, and the reference's f64 FMA picks its own).
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// weights is nb random blocks of d; extreme blocks (every third) have the
// largest or tiniest f16 scales and saturated quants and scales.
func weights(d ops.BlockDecode, nb int, r *rand.Rand) []byte {
	w := opstest.Blocks(d, nb, r)
	for i := 0; i < nb; i++ {
		if i%3 != 2 {
			continue
		}
		b := w[i*d.Bytes : (i+1)*d.Bytes]
		for j := range b {
			b[j] = []byte{0xff, 0x00, byte(r.Uint32())}[r.IntN(3)]
		}
		for _, off := range d.F16 {
			h := []uint16{0x7bff, 0xfbff, 0x0001, 0x8400, 0x3c00, 0}[r.IntN(6)] // ±65504, subnormal, -2^-14, 1, 0
			binary.LittleEndian.PutUint16(b[off:], h)
		}
	}
	return w
}

// activations is a Q8_K row quantized as the matmul does, with some blocks
// replaced by raw extremes: quants of ±127 and -128 (which the quantizer
// never writes, but the bytes allow), consistent bsums, any scale.
func activations(n int, r *rand.Rand) []byte {
	scale := []float32{1, 1e-3, 1e3, 1e-30, 3e30}[r.IntN(5)]
	x := opstest.Row(quant.Q8_K, n, opstest.Floats(n, scale, r), r)
	for i := 0; i < n/qk; i++ {
		if r.IntN(3) != 0 {
			continue
		}
		b := x[i*q8kBytes : (i+1)*q8kBytes]
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(r.NormFloat64())*[]float32{1, 1e-20, 1e20}[r.IntN(3)]))
		for j := 4; j < 260; j++ {
			b[j] = []byte{0x80, 0x7f, 0x81, byte(r.Uint32())}[r.IntN(4)]
		}
		fixBsums(b)
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

var lengths = []int{256, 512, 768, 2048, 4096, 8192 + 256}

func TestDotMatchesCpugen(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			t.Run(fmt.Sprintf("%s/%s", o.name, k.ISA), func(t *testing.T) {
				r := rand.New(rand.NewPCG(1, uint64(len(o.name))))
				for _, n := range lengths {
					for rep := 0; rep < 12; rep++ {
						w, x := weights(o.blk, n/qk, r), activations(n, r)
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

// tiles are k's Tile and small tiles as (tile, weight rows, activation rows).
func tiles(k cpukern.Kernel) []struct {
	f    cpukern.Tile
	w, x int
} {
	var l []struct {
		f    cpukern.Tile
		w, x int
	}
	if k.Tile != nil {
		l = append(l, struct {
			f    cpukern.Tile
			w, x int
		}{k.Tile, k.TileW, k.TileX})
	}
	for _, s := range k.Small {
		l = append(l, struct {
			f    cpukern.Tile
			w, x int
		}{s.Tile, 1, s.X})
	}
	return l
}

// TestTileMatchesCpugen holds every tile shape to cpugen and the Dot, bit
// for bit, over padded strides, and checks nothing is written outside its
// outputs (the padding and the tail keep a NaN sentinel).
func TestTileMatchesCpugen(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			for _, tl := range tiles(k) {
				t.Run(fmt.Sprintf("%s/%s/%dx%d", o.name, k.ISA, tl.w, tl.x), func(t *testing.T) {
					r := rand.New(rand.NewPCG(2, uint64(len(o.name)+tl.x)))
					sentinel := math.Float32frombits(0x7fc0dead)
					for _, n := range lengths {
						nb := n / qk
						// padded strides, so a tile that ignores them shows
						wstride, xstride, ostride := nb*o.blk.Bytes+o.blk.Bytes, nb*q8kBytes+q8kBytes, tl.w+3
						w := weights(o.blk, (tl.w*wstride)/o.blk.Bytes, r)
						x := make([]byte, tl.x*xstride)
						for i := 0; i < tl.x; i++ {
							copy(x[i*xstride:], activations(n, r))
						}
						out := make([]float32, tl.x*ostride+8)
						for i := range out {
							out[i] = sentinel
						}
						tl.f(n, w, wstride, x, xstride, out, ostride)
						for i := range out {
							if i/ostride < tl.x && i%ostride < tl.w {
								continue
							}
							if math.Float32bits(out[i]) != math.Float32bits(sentinel) {
								t.Fatalf("n=%d: out[%d] (outside the tile) written: %v", n, i, out[i])
							}
						}
						for i := 0; i < tl.x; i++ {
							for j := 0; j < tl.w; j++ {
								got := out[i*ostride+j]
								agree(t, o.name, n, w[j*wstride:], x[i*xstride:], got, fmt.Sprintf("out[%d,%d]", i, j))
								if d := k.Dot(n, w[j*wstride:], x[i*xstride:]); !sameBits(d, got) {
									t.Fatalf("n=%d out[%d,%d]: tile %v, its Dot %v", n, i, j, got, d)
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestRowsMatchesCpugen holds the decode rows kernels to cpugen and to
// their Dot, bit for bit, over padded weight strides and row counts that
// cover one row, a few, and more than a prefetch distance.
func TestRowsMatchesCpugen(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			if k.Rows == nil {
				t.Errorf("%s/%s: no Rows kernel", o.name, k.ISA)
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", o.name, k.ISA), func(t *testing.T) {
				r := rand.New(rand.NewPCG(3, uint64(len(o.name))))
				for _, n := range lengths {
					nb := n / qk
					for _, rows := range []int{1, 3, 17} {
						// padded stride, so a kernel that ignores it shows
						wstride := nb*o.blk.Bytes + o.blk.Bytes
						w := weights(o.blk, rows*wstride/o.blk.Bytes, r)
						x := activations(n, r)
						out := make([]float32, rows+1)
						out[rows] = 42
						// a prefetch distance changes no result: none, a
						// line, the default, far past the matrix
						pf := []int{0, 64, cpukern.DefaultPrefetch, 1 << 20}[(n/qk+rows)%4]
						k.Rows(n, w, wstride, x, out[:rows], pf)
						if out[rows] != 42 {
							t.Fatalf("n=%d rows=%d: wrote past out", n, rows)
						}
						for j := 0; j < rows; j++ {
							got := out[j]
							agree(t, o.name, n, w[j*wstride:], x, got, fmt.Sprintf("rows %d out[%d]", rows, j))
							if d := k.Dot(n, w[j*wstride:], x); !sameBits(d, got) {
								t.Fatalf("n=%d rows=%d out[%d]: rows %v, its Dot %v", n, rows, j, got, d)
							}
						}
					}
				}
				k.Rows(256, nil, 0, make([]byte, q8kBytes), nil, cpukern.DefaultPrefetch) // no rows: nothing read
			})
		}
	}
}

func TestShortRowsPanic(t *testing.T) {
	for _, o := range orders {
		for _, k := range registered(t, o.name) {
			var fs []func()
			for _, f := range []func(){
				func() { k.Dot(512, make([]byte, o.blk.Bytes), make([]byte, 2*q8kBytes)) },
				func() { k.Dot(300, make([]byte, 2*o.blk.Bytes), make([]byte, 2*q8kBytes)) },
				func() {
					k.Tile(256, make([]byte, o.blk.Bytes), o.blk.Bytes, make([]byte, q8kBytes), q8kBytes, make([]float32, 8), 1)
				},
				func() { // the second row short
					k.Rows(256, make([]byte, 2*o.blk.Bytes-1), o.blk.Bytes, make([]byte, q8kBytes), make([]float32, 2), cpukern.DefaultPrefetch)
				},
				func() { // a stride below a row
					k.Rows(512, make([]byte, 4*o.blk.Bytes), o.blk.Bytes, make([]byte, 2*q8kBytes), make([]float32, 2), cpukern.DefaultPrefetch)
				},
			} {
				fs = append(fs, f)
			}
			for _, sm := range k.Small { // the last activation row short
				fs = append(fs, func() {
					sm.Tile(256, make([]byte, o.blk.Bytes), o.blk.Bytes, make([]byte, sm.X*q8kBytes-1), q8kBytes, make([]float32, sm.X), 1)
				})
			}
			for _, f := range fs {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s: no panic on a short row", o.name)
						}
					}()
					f()
				}()
			}
		}
	}
}

func quantizer(t testing.TB) cpukern.Quantizer {
	q, ok := cpukern.LookupQuantizer(quant.Q8_K)
	if !ok {
		t.Skipf("no native Q8_K quantizer: %s/%s or the CPU lacks AVX2", runtime.GOOS, runtime.GOARCH)
	}
	return q
}

func sameQ8K(t *testing.T, q cpukern.Quantizer, x []float32, what string) {
	t.Helper()
	got, want := make([]byte, len(x)/qk*q8kBytes), make([]byte, len(x)/qk*q8kBytes)
	for i := range got {
		got[i] = 0xa5 // every byte must be written
	}
	q.Quantize(x, got)
	if err := quant.QuantizeRowX86(quant.Q8_K, x, want); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d (block %d offset %d) is %#x, quant %#x", what, i, i/q8kBytes, i%q8kBytes, got[i], want[i])
		}
	}
}

func TestQuantizerMatches(t *testing.T) {
	q := quantizer(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range lengths {
		for _, s := range []float32{1, 1e-3, 1e3, 1e-38, 3e38} {
			sameQ8K(t, q, opstest.Floats(n, s, r), fmt.Sprintf("n=%d scale %g", n, s))
		}
	}
	special := func(f func(x []float32)) []float32 {
		x := opstest.Floats(512, 2, r)
		f(x)
		return x
	}
	nan := float32(math.NaN())
	for name, x := range map[string][]float32{
		"zeros":           make([]float32, 512),
		"negative zeros":  special(func(x []float32) { clear(x[:256]); x[3] = float32(math.Copysign(0, -1)) }),
		"one value":       special(func(x []float32) { clear(x[:256]); x[200] = -0.5 }),
		"ties for amax":   special(func(x []float32) { x[7], x[9] = -4, 4; x[300], x[301] = 5, -5 }),
		"last is amax":    special(func(x []float32) { x[255] = -9 }),
		"halves":          special(func(x []float32) { x[0] = 127; x[1], x[2], x[3] = 0.5, 1.5, -2.5 }),
		"nan":             special(func(x []float32) { x[5], x[260] = nan, nan }),
		"inf":             special(func(x []float32) { x[17] = float32(math.Inf(-1)); x[400] = float32(math.Inf(1)) }),
		"denormal":        special(func(x []float32) { clear(x[:256]); x[10], x[11] = 1e-45, -3e-45 }),
		"subnormal scale": special(func(x []float32) { x[0] = 1e-40 }),
	} {
		sameQ8K(t, q, x, name)
	}
}

func FuzzDotQ4_KAVX2(f *testing.F)      { fuzzDot(f, 0) }
func FuzzDotQ5_KAVX2(f *testing.F)      { fuzzDot(f, 1) }
func FuzzDotQ6_KAVX2(f *testing.F)      { fuzzDot(f, 2) }
func FuzzDotQ4_KRepack8x8(f *testing.F) { fuzzDot(f, 3) }

// fuzzDot: any weight bytes (NaN and Inf scales included) and any Q8_K
// quants and scale, bsums consistent with the quants as every Q8_K row is.
func fuzzDot(f *testing.F, which int) {
	o := orders[which]
	f.Add([]byte{1, 2, 3}, uint64(1))
	f.Add(make([]byte, 64), uint64(7))
	f.Fuzz(func(t *testing.T, seed []byte, s uint64) {
		ks := registered(t, o.name)
		r := rand.New(rand.NewPCG(s, uint64(len(seed))))
		nb := 1 + int(s%5)
		w := make([]byte, nb*o.blk.Bytes)
		x := make([]byte, nb*q8kBytes)
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
		for i := 0; i < nb; i++ {
			fixBsums(x[i*q8kBytes : (i+1)*q8kBytes])
		}
		for _, k := range ks {
			agree(t, o.name, nb*qk, w, x, k.Dot(nb*qk, w, x), k.ISA)
			// every tile shape: x first, the other rows random
			for _, tl := range tiles(k) {
				// w first, the other weight rows random
				ws := make([]byte, tl.w*len(w))
				copy(ws, w)
				for i := len(w); i < len(ws); i++ {
					ws[i] = byte(r.Uint32())
				}
				xs := make([]byte, tl.x*len(x))
				copy(xs, x)
				for i := len(x); i < len(xs); i++ {
					xs[i] = byte(r.Uint32())
				}
				for i := 0; i < tl.x*nb; i++ {
					fixBsums(xs[i*q8kBytes : (i+1)*q8kBytes])
				}
				out := make([]float32, tl.x*tl.w)
				tl.f(nb*qk, ws, len(w), xs, len(x), out, tl.w)
				for i := 0; i < tl.x; i++ {
					for j := 0; j < tl.w; j++ {
						agree(t, o.name, nb*qk, ws[j*len(w):], xs[i*len(x):], out[i*tl.w+j],
							fmt.Sprintf("%s %d×%d out[%d,%d]", k.ISA, tl.w, tl.x, i, j))
					}
				}
			}
		}
	})
}

func FuzzQuantizeQ8K(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f}, uint64(1))
	f.Fuzz(func(t *testing.T, seed []byte, s uint64) {
		q := quantizer(t)
		r := rand.New(rand.NewPCG(s, 5))
		x := opstest.Floats(qk*(1+int(s%3)), float32(math.Ldexp(1, int(s%200)-100)), r)
		for i := 0; i+4 <= len(seed) && i/4 < len(x); i += 4 {
			x[i/4] = math.Float32frombits(binary.LittleEndian.Uint32(seed[i:]))
		}
		sameQ8K(t, q, x, "fuzz")
	})
}

func benchRows(b *testing.B, blk ops.BlockDecode, n, rows int) ([]byte, []byte) {
	r := rand.New(rand.NewPCG(9, 9))
	return opstest.Blocks(blk, n/qk, r), opstest.Row(quant.Q8_K, rows*n, nil, r)
}

func BenchmarkDot(b *testing.B) {
	for _, o := range orders {
		ref := reference(b, o.name)
		ks := cpukern.All(o.name)
		for _, n := range []int{2048, 8192} {
			w, x := benchRows(b, o.blk, n, tileX)
			b.Run(fmt.Sprintf("%s/n=%d/cpugen", o.name, n), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for b.Loop() {
					ref(n, w, x)
				}
			})
			b.Run(fmt.Sprintf("%s/n=%d/cpugen-x%d", o.name, n, tileX), func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				xs := n / qk * q8kBytes
				for b.Loop() {
					for i := 0; i < tileX; i++ {
						ref(n, w, x[i*xs:])
					}
				}
			})
			for _, k := range ks {
				b.Run(fmt.Sprintf("%s/n=%d/%s-dot", o.name, n, k.ISA), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					for b.Loop() {
						k.Dot(n, w, x)
					}
				})
				for _, tl := range tiles(k) {
					// bytes: the weight row once per tile call; per activation row, see ns/op / x
					b.Run(fmt.Sprintf("%s/n=%d/%s-tile%dx%d", o.name, n, k.ISA, tl.w, tl.x), func(b *testing.B) {
						ws := bytes.Repeat(w, tl.w) // tl.w weight rows
						b.SetBytes(int64(len(ws)))
						xs := n / qk * q8kBytes
						out := make([]float32, tl.x*tl.w)
						for b.Loop() {
							tl.f(n, ws, len(w), x, xs, out, tl.w)
						}
						b.ReportMetric(float64(n*tl.w*tl.x)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
					})
				}
			}
		}
	}
}

func BenchmarkQuantizeQ8K(b *testing.B) {
	x := opstest.Floats(2048, 1, rand.New(rand.NewPCG(1, 1)))
	dst := make([]byte, 8*q8kBytes)
	b.Run("quant", func(b *testing.B) {
		b.SetBytes(4 * 2048)
		for b.Loop() {
			_ = quant.QuantizeRowX86(quant.Q8_K, x, dst)
		}
	})
	if q, ok := cpukern.LookupQuantizer(quant.Q8_K); ok {
		b.Run(q.ISA, func(b *testing.B) {
			b.SetBytes(4 * 2048)
			for b.Loop() {
				q.Quantize(x, dst)
			}
		})
	}
}

func TestNoAllocations(t *testing.T) {
	if len(cpukern.All("DotQ4_KAVX2")) == 0 {
		t.Skip("no native K-quant kernel registered on this CPU")
	}
	for _, order := range []string{"DotQ4_KAVX2", "DotQ4_KRepack8x8", "DotQ6_KAVX2"} {
		for _, k := range cpukern.All(order) {
			const n = 512
			w := make([]byte, 2*n/256*256) // two rows of n/256*256 bytes, for a 2×8
			x := make([]byte, tileX*(n/256)*400)
			xs := (n / 256) * 292
			out := make([]float32, 2*tileX)
			if a := testing.AllocsPerRun(50, func() { k.Dot(n, w, x) }); a != 0 {
				t.Errorf("%s/%s Dot: %v allocations a call", order, k.ISA, a)
			}
			if a := testing.AllocsPerRun(50, func() { k.Tile(n, w, len(w)/2, x, xs, out, k.TileW) }); a != 0 {
				t.Errorf("%s/%s Tile: %v allocations a call", order, k.ISA, a)
			}
			for _, sm := range k.Small {
				if a := testing.AllocsPerRun(50, func() { sm.Tile(n, w, len(w)/2, x, xs, out, 1) }); a != 0 {
					t.Errorf("%s/%s 1×%d tile: %v allocations a call", order, k.ISA, sm.X, a)
				}
			}
			if a := testing.AllocsPerRun(50, func() { k.Rows(n, w, len(w)/2, x, out[:1], cpukern.DefaultPrefetch) }); a != 0 {
				t.Errorf("%s/%s Rows: %v allocations a call", order, k.ISA, a)
			}
		}
	}
}

// BenchmarkRows is the decode kernels (Rows) on 64 weight rows, in cache:
// the bodies' own speed, without the per-call cost of Dot.
func BenchmarkRows(b *testing.B) {
	for _, o := range orders {
		for _, k := range cpukern.All(o.name) {
			if k.Rows == nil {
				continue
			}
			for _, c := range []struct{ n, rows int }{{2048, 64}, {8192, 64}, {2048, 1 << 15}} {
				n, rows := c.n, c.rows // the last out of cache: decode's DRAM stream
				w, x := benchRows(b, o.blk, n*rows, 1)
				x = x[:n/qk*q8kBytes]
				out := make([]float32, rows)
				b.Run(fmt.Sprintf("%s/n=%d/rows=%d/%s", o.name, n, rows, k.ISA), func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					for b.Loop() {
						k.Rows(n, w, n/qk*o.blk.Bytes, x, out, cpukern.DefaultPrefetch)
					}
				})
			}
		}
	}
}
