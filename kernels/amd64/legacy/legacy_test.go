//go:build amd64

package legacy

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// check compares a native result with its order: equal to the once-rounded
// model always, and to the cpugen function unless cpugen's double-rounded
// FMA (model under fmaTwice) explains the difference.
func check(t testing.TB, s spec, n int, w, x []byte, got float32, what string) {
	t.Helper()
	exact := model(s.order, fma32)(n, w, x)
	if !same(got, exact) {
		t.Fatalf("%s n=%d: native %#08x, once-rounded model %#08x", what, n, math.Float32bits(got), math.Float32bits(exact))
	}
	ref, ok := cpugenOf[s.order]
	if !ok {
		return
	}
	if c := ref(n, w, x); !same(got, c) {
		twice := model(s.order, fmaTwice)(n, w, x)
		if !same(twice, c) || same(twice, exact) {
			t.Fatalf("%s n=%d: native %#08x, cpugen %#08x, double-rounding model %#08x", what, n, math.Float32bits(got), math.Float32bits(c), math.Float32bits(twice))
		}
		cpugenDoubleRounded++
	}
}

// cpugenDoubleRounded counts results where cpugen's float64 FMA rounded
// twice and the native kernel (like the hardware ggml runs on) did not.
var cpugenDoubleRounded int

// same is bit equality, any NaN matching any NaN (payloads are not part of
// the orders).
func same(a, b float32) bool { return sameBits(a, b) }

// registered finds the cpukern entry for s, or skips when the CPU lacks
// its instruction set.
func registered(t testing.TB, s spec) cpukern.Kernel {
	t.Helper()
	if !s.isa.has() {
		t.Skipf("CPU lacks %s: %s kernel not registered", s.isa.name, s.order)
	}
	for _, k := range cpukern.All(s.order) {
		if k.ISA == s.isa.name && k.Type == s.typ && k.TileW == s.tileW && k.TileX == s.tileX && k.Rank == s.rank {
			return k
		}
	}
	t.Fatalf("%s/%s: the CPU has the ISA but the kernel is not registered", s.order, s.isa.name)
	return cpukern.Kernel{}
}

func name(s spec) string { return fmt.Sprintf("%s/%s/%dx%d", s.order, s.isa.name, s.tileW, s.tileX) }

// Extreme f16 scales: max, -max, smallest subnormal, smallest normal, ±0, 1.
var extremeF16 = []uint16{0x7bff, 0xfbff, 0x0001, 0x8001, 0x0400, 0x0000, 0x8000, 0x3c00, 0x1400}

func f16Scale(r *rand.Rand, extreme bool) uint16 {
	if extreme && r.IntN(2) == 0 {
		return extremeF16[r.IntN(len(extremeF16))]
	}
	return quant.F32ToF16(float32(r.NormFloat64()) * 0.05)
}

// weights is a random row of n values of s's type.
func weights(r *rand.Rand, s spec, n int, extreme bool) []byte {
	b := make([]byte, need(n, s.qk, s.wb))
	switch s.typ {
	case quant.F32:
		for i := 0; i < n; i++ {
			v := float32(r.NormFloat64())
			if extreme {
				switch r.IntN(6) {
				case 0:
					v *= 1e30
				case 1:
					v *= 1e-40 // subnormal
				case 2:
					v = float32(math.Copysign(0, float64(v)))
				}
			}
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case quant.F16:
		for i := 0; i < n; i++ {
			h := quant.F32ToF16(float32(r.NormFloat64()))
			if extreme && r.IntN(3) == 0 {
				h = uint16(r.Uint32())
				if h&0x7c00 == 0x7c00 { // no Inf/NaN here (the fuzz test has them)
					h &^= 0x4000
				}
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
	case quant.MXFP4:
		for blk := 0; blk < len(b)/s.wb; blk++ {
			o := blk * s.wb
			for k := 1; k < s.wb; k++ {
				b[o+k] = byte(r.Uint32())
			}
			b[o] = byte(120 + r.IntN(10)) // 2^-8 .. 2^1
			if extreme && r.IntN(2) == 0 {
				b[o] = []byte{0, 1, 2, 127, 200, 254, 255}[r.IntN(7)]
			}
		}
	default:
		for blk := 0; blk < len(b)/s.wb; blk++ {
			o := blk * s.wb
			for k := 2; k < s.wb; k++ {
				b[o+k] = byte(r.Uint32())
			}
			binary.LittleEndian.PutUint16(b[o:], f16Scale(r, extreme))
		}
	}
	return b
}

// activations is the partner row: the x86 Q8_0 rounding of random floats,
// or (extreme) raw quants with any byte, -128 included.
func activations(r *rand.Rand, s spec, n int, extreme bool) []byte {
	if s.qk == 1 {
		return weights(r, s, n, extreme)
	}
	b := make([]byte, need(n, 32, 34))
	if extreme && r.IntN(2) == 0 {
		for blk := 0; blk < len(b)/34; blk++ {
			for k := 2; k < 34; k++ {
				b[blk*34+k] = byte(r.Uint32())
			}
			binary.LittleEndian.PutUint16(b[blk*34:], f16Scale(r, true))
		}
		return b
	}
	f := make([]float32, n/32*32)
	for i := range f {
		f[i] = float32(r.NormFloat64())
	}
	if err := quant.QuantizeRowX86(quant.Q8_0, f, b); err != nil {
		panic(err)
	}
	return b
}

func lengths(s spec) []int {
	if s.qk == 1 {
		return []int{0, 1, 3, 15, 16, 17, 31, 48, 63, 64, 65, 127, 128, 200, 1000, 2048, 2051}
	}
	return []int{0, 31, 32, 33, 64, 96, 160, 256, 1000, 2048, 4128}
}

func TestDotMatchesCpugen(t *testing.T) {
	for _, s := range specs {
		t.Run(name(s), func(t *testing.T) {
			k := registered(t, s)
			r := rand.New(rand.NewPCG(1, uint64(len(s.order))))
			for _, n := range lengths(s) {
				for trial := 0; trial < 20; trial++ {
					extreme := trial%2 == 1
					w, x := weights(r, s, n, extreme), activations(r, s, n, extreme)
					check(t, s, n, w, x, k.Dot(n, w, x), fmt.Sprintf("trial %d", trial))
				}
			}
		})
	}
}

func TestTileMatchesDot(t *testing.T) {
	for _, s := range specs {
		t.Run(name(s), func(t *testing.T) {
			k := registered(t, s)
			if s.tile == nil {
				if k.Tile != nil {
					t.Fatal("a Dot-only kernel registered a Tile")
				}
				t.Skip("Dot only: no tile")
			}
			if k.Tile == nil || k.TileW != s.tileW || k.TileX != s.tileX {
				t.Fatalf("tile %dx%d registered as %dx%d", s.tileW, s.tileX, k.TileW, k.TileX)
			}
			r := rand.New(rand.NewPCG(2, uint64(len(s.order))))
			for _, n := range lengths(s) {
				for trial := 0; trial < 4; trial++ {
					extreme := trial%2 == 1
					// odd strides: rows at unaligned addresses
					wrow, xrow := need(n, s.qk, s.wb), need(n, s.qk, s.xb)
					ws, xs, os := wrow+7, xrow+5, k.TileW+3
					w := make([]byte, (k.TileW-1)*ws+wrow)
					x := make([]byte, (k.TileX-1)*xs+xrow)
					for j := 0; j < k.TileW; j++ {
						copy(w[j*ws:], weights(r, s, n, extreme))
					}
					for i := 0; i < k.TileX; i++ {
						copy(x[i*xs:], activations(r, s, n, extreme))
					}
					out := make([]float32, (k.TileX-1)*os+k.TileW)
					sentinel := float32(-12345.5)
					for i := range out {
						out[i] = sentinel
					}
					k.Tile(n, w, ws, x, xs, out, os)
					for i := range out {
						ii, j := i/os, i%os
						if j >= k.TileW {
							if out[i] != sentinel {
								t.Fatalf("n=%d: tile wrote out[%d], outside the tile", n, i)
							}
							continue
						}
						wj, xi := w[j*ws:j*ws+wrow], x[ii*xs:ii*xs+xrow]
						if d := k.Dot(n, wj, xi); math.Float32bits(out[i]) != math.Float32bits(d) && !(d != d && out[i] != out[i]) {
							t.Fatalf("n=%d trial %d: tile (%d,%d) = %#08x, Dot %#08x", n, trial, ii, j, math.Float32bits(out[i]), math.Float32bits(d))
						}
						check(t, s, n, wj, xi, out[i], fmt.Sprintf("tile (%d,%d) trial %d", ii, j, trial))
					}
				}
			}
		})
	}
}

// TestRowsMatchDot holds each Rows (the decode form over the 4×1 tile) to
// the Dot, bit for bit, with odd strides and row counts around the tile.
func TestRowsMatchDot(t *testing.T) {
	for _, s := range specs {
		t.Run(name(s), func(t *testing.T) {
			k := registered(t, s)
			if _, ok := decodeTile(s); !ok {
				if k.Rows != nil {
					t.Fatal("Rows registered without a 4×1 tile")
				}
				t.Skip("no 4×1 tile: no Rows")
			}
			if k.Rows == nil {
				t.Fatal("no Rows registered")
			}
			r := rand.New(rand.NewPCG(3, uint64(len(s.order))))
			for _, n := range lengths(s) {
				for _, rows := range []int{1, 3, 4, 9} {
					extreme := rows%2 == 1
					wrow := need(n, s.qk, s.wb)
					ws := wrow + 7
					w := make([]byte, (rows-1)*ws+wrow)
					for j := 0; j < rows; j++ {
						copy(w[j*ws:], weights(r, s, n, extreme))
					}
					x := activations(r, s, n, extreme)
					out := make([]float32, rows+1)
					out[rows] = -12345.5
					k.Rows(n, w, ws, x, out[:rows], cpukern.DefaultPrefetch)
					if out[rows] != -12345.5 {
						t.Fatalf("n=%d rows=%d: wrote past out", n, rows)
					}
					for j := 0; j < rows; j++ {
						wj := w[j*ws : j*ws+wrow]
						if d := k.Dot(n, wj, x); math.Float32bits(out[j]) != math.Float32bits(d) && !(d != d && out[j] != out[j]) {
							t.Fatalf("n=%d rows=%d: out[%d] = %#08x, Dot %#08x", n, rows, j, math.Float32bits(out[j]), math.Float32bits(d))
						}
					}
				}
			}
			n := 64
			w, x := make([]byte, need(n, s.qk, s.wb)), make([]byte, need(n, s.qk, s.xb))
			mustPanic(t, "rows: second row short", func() { k.Rows(n, w, len(w), x, make([]float32, 2), cpukern.DefaultPrefetch) })
			mustPanic(t, "rows: stride below a row", func() { k.Rows(n, append(w, w...), len(w)-1, x, make([]float32, 2), cpukern.DefaultPrefetch) })
			mustPanic(t, "rows: huge stride", func() { k.Rows(n, w, math.MaxInt/2, x, make([]float32, 3), cpukern.DefaultPrefetch) })
			mustPanic(t, "rows: short activations", func() { k.Rows(n, w, len(w), x[:len(x)-1], make([]float32, 1), cpukern.DefaultPrefetch) })
		})
	}
}

// TestRowsContiguous is Rows in the decode layout, rows back to back
// (wstride the row length, where a body's prefetches of the groups ahead
// land in the rows it reads next), over many groups and odd block counts
// (the 16-block multiples and neighbours, a head-like 1024 values), each
// element the Dot's and the order's.
func TestRowsContiguous(t *testing.T) {
	for _, s := range specs {
		if s.tileW != 4 || s.tileX != 1 || s.tile == nil || s.qk == 1 {
			continue
		}
		t.Run(name(s), func(t *testing.T) {
			k := registered(t, s)
			r := rand.New(rand.NewPCG(13, uint64(len(s.order))))
			for _, n := range []int{32, 480, 512, 544, 1024, 3072} {
				for _, rows := range []int{4, 8, 37} {
					wrow := need(n, s.qk, s.wb)
					w := make([]byte, 0, rows*wrow)
					for j := 0; j < rows; j++ {
						w = append(w, weights(r, s, n, rows == 37)...)
					}
					x := activations(r, s, n, rows == 37)
					out := make([]float32, rows)
					k.Rows(n, w, wrow, x, out, cpukern.DefaultPrefetch)
					for j := range out {
						wj := w[j*wrow : (j+1)*wrow]
						if d := k.Dot(n, wj, x); !same(out[j], d) {
							t.Fatalf("n=%d rows=%d: out[%d] = %#08x, Dot %#08x", n, rows, j, math.Float32bits(out[j]), math.Float32bits(d))
						}
						check(t, s, n, wj, x, out[j], fmt.Sprintf("rows=%d row %d", rows, j))
					}
				}
			}
		})
	}
}

func TestPrefetchAhead(t *testing.T) {
	for _, c := range []struct{ wstride, want int }{
		{0, 0}, {34, 8160}, {1088, 8704}, {1632, 6528}, {3264, 13056}, {1 << 20, 4 << 20},
	} {
		if got := prefetchAhead(c.wstride); got != c.want {
			t.Errorf("prefetchAhead(%d) = %d, want %d", c.wstride, got, c.want)
		}
	}
}

func TestBadInputPanics(t *testing.T) {
	for _, s := range specs {
		t.Run(name(s), func(t *testing.T) {
			k := registered(t, s)
			n := 64
			w, x := make([]byte, need(n, s.qk, s.wb)), make([]byte, need(n, s.qk, s.xb))
			mustPanic(t, "short weights", func() { k.Dot(n, w[:len(w)-1], x) })
			mustPanic(t, "short activations", func() { k.Dot(n, w, x[:len(x)-1]) })
			mustPanic(t, "negative n", func() { k.Dot(-32, w, x) })
			mustPanic(t, "overflowing n", func() { k.Dot(math.MaxInt-31, w, x) })
			if k.Tile == nil {
				return
			}
			mustPanic(t, "tile: overflowing n", func() { k.Tile(math.MaxInt-31, w, 0, x, 0, make([]float32, 64), 0) })
			out := make([]float32, k.TileW*k.TileX)
			mustPanic(t, "tile: one weight row", func() { k.Tile(n, w, len(w), x, len(x), out, k.TileW) })
			big := make([]byte, len(w)*k.TileW+len(x)*k.TileX)
			mustPanic(t, "tile: short out", func() { k.Tile(n, big, len(w), big, len(x), out[:len(out)-1], k.TileW) })
			mustPanic(t, "tile: huge stride", func() { k.Tile(n, big, math.MaxInt/2, big, len(x), out, k.TileW) })
		})
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

func TestQuantizerMatchesX86(t *testing.T) {
	if !isaAVX2.has() {
		t.Skip("CPU lacks avx2: Q8_0 quantizer not registered")
	}
	q, ok := cpukern.LookupQuantizer(quant.Q8_0)
	if !ok || q.ISA != isaAVX2.name {
		t.Fatalf("Q8_0 quantizer not registered (got %+v)", q)
	}
	r := rand.New(rand.NewPCG(3, 4))
	blocks := map[string]func(b []float32){
		"normal": func(b []float32) {
			for i := range b {
				b[i] = float32(r.NormFloat64())
			}
		},
		"zeros":     func(b []float32) { clear(b) },
		"neg zeros": func(b []float32) { fill(b, float32(math.Copysign(0, -1))) },
		"ties": func(b []float32) { // amax 127: id 1, so k+0.5 is an exact tie
			for i := range b {
				b[i] = float32(r.IntN(254)-127) + 0.5
			}
			b[r.IntN(32)] = 127
		},
		"ties scaled": func(b []float32) { // amax 63.5: id 2, ties at k/2+0.25
			for i := range b {
				b[i] = float32(r.IntN(254)-127)/2 + 0.25
			}
			b[r.IntN(32)] = -63.5
		},
		"huge":      func(b []float32) { scaled(r, b, 3e38) },
		"tiny":      func(b []float32) { scaled(r, b, 1e-38) },
		"subnormal": func(b []float32) { scaled(r, b, 1e-44) }, // 127/amax overflows to Inf
		"one":       func(b []float32) { clear(b); b[r.IntN(32)] = float32(r.NormFloat64()) },
		"nan": func(b []float32) {
			scaled(r, b, 1)
			b[r.IntN(32)] = float32(math.NaN())
		},
		"f16 overflow": func(b []float32) { scaled(r, b, 1e7) }, // d > 65504: Inf scale
	}
	for name, gen := range blocks {
		t.Run(name, func(t *testing.T) {
			for _, nb := range []int{0, 1, 2, 7, 64} {
				x := make([]float32, 32*nb)
				for blk := 0; blk < nb; blk++ {
					if blk%3 == 1 {
						blocks["normal"](x[32*blk : 32*blk+32])
					} else {
						gen(x[32*blk : 32*blk+32])
					}
				}
				want, got := make([]byte, 34*nb), make([]byte, 34*nb+1)
				got[34*nb] = 0xa5
				if err := quant.QuantizeRowX86(quant.Q8_0, x, want); err != nil {
					t.Fatal(err)
				}
				q.Quantize(x, got)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("nb=%d: byte %d (block %d, offset %d) = %#02x, QuantizeRowX86 %#02x", nb, i, i/34, i%34, got[i], want[i])
					}
				}
				if got[34*nb] != 0xa5 {
					t.Fatalf("nb=%d: wrote past the row", nb)
				}
			}
		})
	}
	mustPanic(t, "ragged row", func() { q.Quantize(make([]float32, 33), make([]byte, 68)) })
	mustPanic(t, "short dst", func() { q.Quantize(make([]float32, 64), make([]byte, 67)) })
}

func fill(b []float32, v float32) {
	for i := range b {
		b[i] = v
	}
}

func scaled(r *rand.Rand, b []float32, s float64) {
	for i := range b {
		b[i] = float32(r.NormFloat64() * s / 4)
	}
}

// FuzzDot runs every registered kernel on arbitrary bytes (any scale, NaN
// and Inf included) against cpugen and the once-rounded model (see check).
func FuzzDot(f *testing.F) {
	f.Add(uint8(0), uint16(64), []byte{1, 2, 3, 0x80, 0x7f, 0xff, 0x00, 0x7c})
	f.Add(uint8(3), uint16(70), []byte{0x00, 0x7c, 0x01, 0xfc, 0xff, 0x7f})
	f.Add(uint8(5), uint16(17), []byte{0x00, 0x00, 0xc0, 0x7f, 0x00, 0x00, 0x80, 0xff})
	f.Fuzz(func(t *testing.T, which uint8, n16 uint16, data []byte) {
		s := specs[int(which)%len(specs)]
		if !s.isa.has() {
			t.Skipf("CPU lacks %s", s.isa.name)
		}
		k := registered(t, s)
		n := int(n16) % 1200
		w, x := make([]byte, need(n, s.qk, s.wb)), make([]byte, need(n, s.qk, s.xb))
		if len(w) == 0 || len(x) == 0 {
			check(t, s, n, w, x, k.Dot(n, w, x), name(s))
			return
		}
		if len(data) > 0 {
			for i := range w {
				w[i] = data[i%len(data)] ^ byte(i*7)
			}
			for i := range x {
				x[i] = data[(i+len(w))%len(data)] ^ byte(i*13)
			}
		}
		check(t, s, n, w, x, k.Dot(n, w, x), name(s))
		if k.Tile == nil {
			return
		}
		// the tile on rows that differ from each other by a byte rotation
		wrow, xrow := len(w), len(x)
		tw, tx := make([]byte, k.TileW*wrow), make([]byte, k.TileX*xrow)
		for j := 0; j < k.TileW; j++ {
			for i := 0; i < wrow; i++ {
				tw[j*wrow+i] = w[(i+j)%wrow]
			}
		}
		for r := 0; r < k.TileX; r++ {
			for i := 0; i < xrow; i++ {
				tx[r*xrow+i] = x[(i+3*r)%xrow]
			}
		}
		out := make([]float32, k.TileW*k.TileX)
		k.Tile(n, tw, wrow, tx, xrow, out, k.TileW)
		for r := 0; r < k.TileX; r++ {
			for j := 0; j < k.TileW; j++ {
				check(t, s, n, tw[j*wrow:(j+1)*wrow], tx[r*xrow:(r+1)*xrow], out[r*k.TileW+j], fmt.Sprintf("%s tile (%d,%d)", name(s), r, j))
			}
		}
	})
}

const benchN = 2048

func BenchmarkDot(b *testing.B) {
	seen := map[string]bool{}
	for _, s := range specs {
		if seen[s.order+s.isa.name] {
			continue // another tile of the same Dot
		}
		seen[s.order+s.isa.name] = true
		r := rand.New(rand.NewPCG(5, 6))
		w, x := weights(r, s, benchN, false), activations(r, s, benchN, false)
		var sink float32
		f, ok := cpugenOf[s.order]
		ref := "cpugen"
		if !ok {
			f, ref = DotMXFP4AVX2, "goref" // this package's Go reference
		}
		b.Run(s.order+"/"+ref+"/"+s.isa.name, func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				sink += f(benchN, w, x)
			}
		})
		b.Run(s.order+"/native/"+s.isa.name, func(b *testing.B) {
			k := registered(b, s)
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				sink += k.Dot(benchN, w, x)
			}
		})
		_ = sink
	}
}

// BenchmarkTile counts the weight bytes of all TileW·TileX dot products, so
// its GB/s compares with BenchmarkDot's.
func BenchmarkTile(b *testing.B) {
	for _, s := range specs {
		if s.tile == nil {
			continue
		}
		b.Run(fmt.Sprintf("%s/native/%s/%dx%d", s.order, s.isa.name, s.tileW, s.tileX), func(b *testing.B) {
			k := registered(b, s)
			r := rand.New(rand.NewPCG(7, 8))
			wrow, xrow := need(benchN, s.qk, s.wb), need(benchN, s.qk, s.xb)
			w := make([]byte, k.TileW*wrow)
			x := make([]byte, k.TileX*xrow)
			for j := 0; j < k.TileW; j++ {
				copy(w[j*wrow:], weights(r, s, benchN, false))
			}
			for i := 0; i < k.TileX; i++ {
				copy(x[i*xrow:], activations(r, s, benchN, false))
			}
			out := make([]float32, k.TileW*k.TileX)
			b.SetBytes(int64(k.TileW * k.TileX * wrow))
			for b.Loop() {
				k.Tile(benchN, w, wrow, x, xrow, out, k.TileW)
			}
		})
	}
}

func BenchmarkQuantizeQ8_0(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	x := make([]float32, benchN)
	scaled(r, x, 1)
	dst := make([]byte, benchN/32*34)
	b.Run("x86go", func(b *testing.B) {
		b.SetBytes(4 * benchN)
		for b.Loop() {
			_ = quant.QuantizeRowX86(quant.Q8_0, x, dst)
		}
	})
	b.Run("native/avx2", func(b *testing.B) {
		q, ok := cpukern.LookupQuantizer(quant.Q8_0)
		if !ok {
			b.Skip("CPU lacks avx2")
		}
		b.SetBytes(4 * benchN)
		for b.Loop() {
			q.Quantize(x, dst)
		}
	})
}

// BenchmarkRowsQ8_0 is the Q8_0 decode kernels (Rows: one activation row)
// on qwen3-0.6b's matrix shapes (out×in; the last is the output head; 64
// rows sit in L2: the body's own speed), GB/s
// of weight bytes, on one thread and on two (the rows split in halves, as a
// decode step on this 2-core host). hot repeats one matrix (in cache but
// the head); cold cycles through copies of at least 256 MiB, so every
// weight byte comes from DRAM as in decode.
func BenchmarkRowsQ8_0(b *testing.B) {
	for _, s := range specs {
		if s.typ != quant.Q8_0 || s.tileX != 1 || !s.isa.has() {
			continue
		}
		var k cpukern.Kernel
		for _, c := range cpukern.All(s.order) {
			if c.ISA == s.isa.name && c.Type == s.typ && c.Rows != nil {
				k = c
			}
		}
		if k.Rows == nil {
			b.Fatalf("%s: no Rows", name(s))
		}
		for _, c := range []struct{ out, in int }{{64, 1024}, {1024, 1024}, {3072, 1024}, {1024, 3072}, {151936, 1024}} {
			r := rand.New(rand.NewPCG(11, 12))
			wrow := need(c.in, 32, 34)
			size := c.out * wrow
			// 64 distinct random rows, repeated
			proto := make([]byte, 64*wrow)
			for j := 0; j < 64; j++ {
				copy(proto[j*wrow:], weights(r, s, c.in, false))
			}
			copies := max(1, (256<<20+size-1)/size)
			all := make([]byte, copies*size)
			for o := 0; o < len(all); o += copy(all[o:], proto) {
			}
			x := activations(r, s, c.in, false)
			out := make([]float32, c.out)
			for _, mode := range []string{"hot", "cold"} {
				if mode == "hot" && copies == 1 {
					continue
				}
				for _, threads := range []int{1, 2} {
					b.Run(fmt.Sprintf("%s/%dx%d/%s/threads=%d", s.isa.name, c.out, c.in, mode, threads), func(b *testing.B) {
						b.SetBytes(int64(size))
						i := 0
						for b.Loop() {
							w := all[:size]
							if mode == "cold" {
								w = all[i*size : (i+1)*size]
								i = (i + 1) % copies
							}
							if threads == 1 {
								k.Rows(c.in, w, wrow, x, out, cpukern.DefaultPrefetch)
								continue
							}
							h := c.out / 2
							done := make(chan struct{})
							go func() {
								k.Rows(c.in, w[h*wrow:], wrow, x, out[h:], cpukern.DefaultPrefetch)
								close(done)
							}()
							k.Rows(c.in, w, wrow, x, out[:h], cpukern.DefaultPrefetch)
							<-done
						}
					})
				}
			}
		}
	}
}
