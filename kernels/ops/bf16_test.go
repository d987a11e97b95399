package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
)

// bf16Activations are n activations of scale about s, every other one an
// exact tie between two bf16 values (a bf16 value plus half its ulp), so a
// rounding that does not go to even, or does not round, shows in the
// products; a negative zero, subnormals and ties at 1 among them (large
// values would swamp the sums: TestMatVecBF16RoundsAsCPU has them).
func bf16Activations(n int, s float64, r *rand.Rand) []float32 {
	x := make([]float32, n)
	for i := range x {
		v := float32(r.NormFloat64() * s)
		if i%2 == 1 {
			v = math.Float32frombits(math.Float32bits(v)&0xffff0000 | 0x8000)
		}
		x[i] = v
	}
	specials := []float32{float32(math.Copysign(0, -1)), 1e-40, -3e-39, math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000)}
	for i, v := range specials {
		if j := 7 + 13*i; j < n {
			x[j] = v
		}
	}
	return x
}

// bf16Row is the BF16 encoding of v (quant.F32ToBF16, the converter's and
// the CPU's rounding).
func bf16Row(v []float32) []byte {
	b := make([]byte, 2*len(v))
	if err := quant.QuantizeRowX86(quant.BF16, v, b); err != nil {
		panic(err)
	}
	return b
}

// bf16Weights is rows×n random bf16 weights of scale about s.
func bf16Weights(rows, n int, s float64, r *rand.Rand) []byte {
	v := make([]float32, rows*n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * s)
	}
	return bf16Row(v)
}

// warpDotBF16 is the CPU's BF16 dot (bf16 products in f32, sums in f64)
// in the order of a warp's cooperative loop (dsl/kernel threads.go): lane
// l sums values l, l+32, … in order, then the butterfly p[i] + p[i^h] for
// h = 16 … 1.
func warpDotBF16(n int, w, xq []byte) float32 {
	var p [32]float64
	for i := 0; i < n; i++ {
		a := quant.BF16ToF32(uint16(w[2*i]) | uint16(w[2*i+1])<<8)
		b := quant.BF16ToF32(uint16(xq[2*i]) | uint16(xq[2*i+1])<<8)
		p[i%32] += float64(float32(a * b))
	}
	for h := 16; h >= 1; h /= 2 {
		var q [32]float64
		for i := range q {
			q[i] = p[i] + p[i^h]
		}
		p = q
	}
	return float32(p[0])
}

// MatVecBF16 is the CPU runner's BF16 matmul bit for bit (quant.VecDot
// over the activation rounded by quant.F32ToBF16), and MatVecWarpBF16 the
// same arithmetic in the warp's order bit for bit, on rows shorter than a
// warp, of a warp's multiple and ragged ones.
func TestMatVecBF16MatchesCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const rows = 5
	for _, n := range []int{1, 7, 32, 256, 2053} {
		w := bf16Weights(rows, n, 0.05, r)
		x := bf16Activations(n, 3, r)
		xq := bf16Row(x)
		serial, warp := make([]float32, rows), make([]float32, rows)
		if err := k.Run(ops.MatVecBF16(), w, x, serial); err != nil {
			t.Fatal(err)
		}
		if err := k.Run(ops.MatVecWarpBF16(), w, x, warp); err != nil {
			t.Fatal(err)
		}
		for row := range rows {
			wr := w[2*n*row : 2*n*(row+1)]
			if want := quant.VecDot(quant.BF16, n, wr, xq); math.Float32bits(serial[row]) != math.Float32bits(want) {
				t.Errorf("n=%d row %d: MatVecBF16 %v, the CPU's dot %v", n, row, serial[row], want)
			}
			if want := warpDotBF16(n, wr, xq); math.Float32bits(warp[row]) != math.Float32bits(want) {
				t.Errorf("n=%d row %d: MatVecWarpBF16 %v, the warp-ordered dot %v", n, row, warp[row], want)
			}
		}
	}
}

// An activation rounds to bf16 exactly as quant.F32ToBF16 rounds it: one
// weight of 1 in each row of an identity picks out each rounded value
// (the other products are zeros). The values: each bf16 value's
// neighbourhood in f32 (itself, the ties either side and an f32 ulp around
// them) over a spread of exponents, the largest finite ones included, and
// random bit patterns; all that round to a finite bf16 (an infinity times
// the identity's zeros would make every row NaN).
func TestMatVecBF16RoundsAsCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	var xs []float32
	add := func(u uint32) {
		if v := float64(quant.BF16ToF32(quant.F32ToBF16(math.Float32frombits(u)))); !math.IsNaN(v) && !math.IsInf(v, 0) {
			xs = append(xs, math.Float32frombits(u))
		}
	}
	for _, h := range []uint32{0x0001, 0x007f, 0x0080, 0x3f80, 0x3f81, 0x4049, 0x7f7e, 0x7f7f, 0x8001, 0xbf80, 0xc2f7, 0xff7f} {
		base := h << 16
		for _, u := range []uint32{base, base + 0x7fff, base + 0x8000, base + 0x8001, base - 0x8000, base - 0x7fff, base - 0x8001} {
			add(u)
		}
	}
	for len(xs) < 640 {
		add(r.Uint32())
	}
	const n = 32
	id := make([]float32, n*n)
	for i := range n {
		id[i*n+i] = 1
	}
	w := bf16Row(id)
	for lo := 0; lo+n <= len(xs); lo += n {
		x := xs[lo : lo+n]
		for _, mk := range []func() *k.Kernel{ops.MatVecBF16, ops.MatVecWarpBF16} {
			y := make([]float32, n)
			if err := k.Run(mk(), w, x, y); err != nil {
				t.Fatal(err)
			}
			for i, v := range x {
				// == : a row's sum starts at +0, so a −0 comes out +0
				if want := quant.BF16ToF32(quant.F32ToBF16(v)); y[i] != want {
					t.Fatalf("%s: x=%g (%#08x) rounds to %g (%#08x), want %g (%#08x)", mk().Name, v, math.Float32bits(v),
						y[i], math.Float32bits(y[i]), want, math.Float32bits(want))
				}
			}
		}
	}
}

// RoundBF16F16 is quant.F32ToBF16, widened, then quant.F32ToF16, bit for
// bit: over every bf16 value's neighbourhood (the NaNs' included, whose
// payload bits the two roundings keep in part) and random bit patterns.
func TestRoundBF16F16(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	var xs []float32
	for h := uint32(0); h < 1<<16; h++ {
		base := h << 16
		for _, u := range []uint32{base, base + 0x7fff, base + 0x8000, base + 0x8001, base + 0xffff} {
			xs = append(xs, math.Float32frombits(u))
		}
	}
	for range 100000 {
		xs = append(xs, math.Float32frombits(r.Uint32()))
	}
	got := make([]uint16, len(xs))
	if err := k.Run(ops.RoundBF16F16(), xs, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range xs {
		if want := quant.F32ToF16(quant.BF16ToF32(quant.F32ToBF16(v))); got[i] != want {
			t.Fatalf("%g (%#08x): %#04x, want %#04x", v, math.Float32bits(v), got[i], want)
		}
	}
}

// EmbedBF16 (Embed of the BF16 decode) copies each token's row widened,
// bit for bit the CPU's decode (quant.Dequantize), quiet NaNs and
// infinities included.
func TestEmbedBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const vocab, cols = 11, 40
	w := bf16Weights(vocab, cols, 1, r)
	for i, h := range []uint16{0x7fc1, 0xff80, 0x8000, 0x0001, 0x7f7f} {
		j := 2 * (3*cols + 5*i)
		w[j], w[j+1] = byte(h), byte(h>>8)
	}
	tok := []int32{3, 0, 10, 3, 7}
	got := make([]float32, len(tok)*cols)
	if err := k.Run(ops.Embed(ops.BF16), w, tok, got, cols); err != nil {
		t.Fatal(err)
	}
	if name := ops.Embed(ops.BF16).Name; name != "EmbedBF16" {
		t.Errorf("kernel %s, want EmbedBF16", name)
	}
	for row, id := range tok {
		want := make([]float32, cols)
		if err := quant.Dequantize(quant.BF16, w[2*cols*int(id):2*cols*int(id+1)], want); err != nil {
			t.Fatal(err)
		}
		for c := range cols {
			if g := got[row*cols+c]; math.Float32bits(g) != math.Float32bits(want[c]) {
				t.Fatalf("row %d (token %d) value %d: %v (%#08x), want %v (%#08x)", row, id, c, g, math.Float32bits(g), want[c], math.Float32bits(want[c]))
			}
		}
	}
}

// DequantF16BF16 (DequantF16 of the BF16 decode) rounds every bf16 value
// to f16 as quant.F32ToF16 rounds its f32 (nearest even; overflow to inf,
// the smallest to f16 subnormals and zero; NaNs quiet, their payload's
// top bits kept): all 65536 of them.
func TestDequantF16BF16(t *testing.T) {
	w := make([]byte, 2<<16)
	for h := range 1 << 16 {
		w[2*h], w[2*h+1] = byte(h), byte(h>>8)
	}
	got := make([]uint16, 1<<16)
	if err := k.Run(ops.DequantF16(ops.BF16), w, got); err != nil {
		t.Fatal(err)
	}
	for h := range 1 << 16 {
		if want := quant.F32ToF16(quant.BF16ToF32(uint16(h))); got[h] != want {
			t.Fatalf("bf16 %#04x: f16 %#04x, want %#04x", h, got[h], want)
		}
	}
}
