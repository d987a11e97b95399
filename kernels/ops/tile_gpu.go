package ops

import (
	"fmt"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Prefill products on the tensor cores: a step's weight matrix is decoded
// once to f16 (DequantF16NAME), then MatMulTile multiplies it with the
// step's activations, which it rounds to f16 as it loads them, summing in
// f32. That is not the mat-vec's arithmetic (its activations are rounded to
// the partner type, its sums run in another order): the product is held to
// it by error bounds, as the GPU mat-vecs are held to the CPU's.

// TileM and TileN are MatMulTile's warp tile in 16×8 pieces: 32 activation
// rows by 32 weight rows (on the H200 × 512 rows: 116–129 TFLOP/s on the
// 1B's square and wide products where 4×4 gives 92–113, 4×2 62–75).
const TileM, TileN = 2, 4

// DequantF16 is DequantF16NAME(w []byte, wh []uint16): every value of the
// blocks of w decoded and rounded to f16 (len(wh) values, a multiple of the
// block's), a thread per warp-cut unit (neighbouring threads store
// neighbouring values) for the types with one, else a thread per block.
func DequantF16(d BlockDecode) *k.Kernel {
	b := k.New("DequantF16" + d.Name)
	b.Doc("decodes every block of w into f16 values.")
	w, wh := b.Buffer("w", k.U8), b.Buffer("wh", k.U16)
	nb := b.Let("nb", wh.Len().Div(d.QK))
	if c, ok := quantWarpCuts()[d.Name]; ok {
		b.ParallelFor("u", 0, nb.Mul(c.units), func(u k.Expr) {
			i := b.Let("i", u.Div(c.units))
			wb := b.View("wb", w, i.Mul(c.bytes), c.bytes)
			c.unit(b, wb, u.Rem(c.units), func(j, v k.Expr) {
				b.Store(wh, i.Mul(c.qk).Add(j), v.F32ToF16())
			})
		})
		return b.MustBuild()
	}
	b.ParallelFor("i", 0, nb, func(i k.Expr) {
		wb := b.View("wb", w, i.Mul(d.Bytes), d.Bytes)
		d.Decode(b, wb, func(j, v k.Expr) { b.Store(wh, i.Mul(d.QK).Add(j), v.F32ToF16()) })
	})
	sched(b, d.Sched)
	return b.MustBuild()
}

// MatMulTile is MatMulTile(x []float32, wh []uint16, y []float32, cols int):
// for each of the rows = len(x)/cols rows r of x, y[r·n+o] = row o of the
// f16 matrix wh (n = len(y)/rows rows of cols values, cols a multiple of
// k.TileK) dotted with row r of x rounded to f16, in f32; a warp per tile
// of 16·TileM rows and 8·TileN weight rows.
func MatMulTile() *k.Kernel { return MatMulTileShape(TileM, TileN) }

// MatMulTileShape is MatMulTile with a warp tile of tm×tn pieces (the
// kernel is MatMulTile at TileM×TileN, MatMulTileMxN otherwise).
func MatMulTileShape(tm, tn int) *k.Kernel {
	name := "MatMulTile"
	if tm != TileM || tn != TileN {
		name = fmt.Sprintf("%s%dx%d", name, tm, tn)
	}
	b := k.New(name)
	b.Doc(fmt.Sprintf("sets y[r*n+o] to row o of the f16 matrix wh dotted with row r of x, on the tensor cores, a warp per %dx%d tile.", 16*tm, 8*tn))
	x, wh, y := b.Buffer("x", k.F32), b.Buffer("wh", k.U16), b.Buffer("y", k.F32)
	cols := b.Scalar("cols", k.Int)
	rows := b.Let("rows", x.Len().Div(cols))
	n := b.Let("n", y.Len().Div(rows))
	nt := b.Let("nt", n.Add(8*tn-1).Div(8*tn))
	mt := b.Let("mt", rows.Add(16*tm-1).Div(16*tm))
	b.ParallelFor("t", 0, mt.Mul(nt), func(t k.Expr) {
		// neighbouring warps share their activation rows
		r0 := b.Let("r0", t.Div(nt).Mul(16*tm))
		o0 := b.Let("o0", t.Rem(nt).Mul(8*tn))
		acc := b.NewTile("acc", tm, tn)
		b.For("kb", 0, cols.Div(k.TileK), func(kb k.Expr) {
			kc := b.Let("kc", kb.Mul(k.TileK))
			b.TileMMA(acc,
				k.TileOperand{Buf: x, Off: r0.Mul(cols).Add(kc), Stride: cols, Rows: rows.Sub(r0)},
				k.TileOperand{Buf: wh, Off: o0.Mul(cols).Add(kc), Stride: cols, Rows: n.Sub(o0)})
		})
		b.TileStore(acc, k.TileOperand{Buf: y, Off: r0.Mul(n).Add(o0), Stride: n, Rows: rows.Sub(r0)}, n.Sub(o0))
	})
	return b.MustBuild()
}

// MatMulBlock is MatMulTile's product (same arguments and result, within
// rounding) with a CTA per sh.Rows()×sh.Cols() block of y, its operands
// staged through shared memory (kernel.BlockMatMul); x is of kind xk: F32,
// or U16 holding f16 bits (kernel name suffix F16: staged as they are,
// half the bytes). Neighbouring CTAs share a block of wh's rows, so a
// matrix is read from memory about once while the activations, a few MiB,
// stay in L2.
func MatMulBlock(sh k.BlockShape, xk k.Kind) *k.Kernel {
	b := k.New(fmt.Sprintf("MatMulBlock%dx%dw%dx%d%s", sh.Rows(), sh.Cols(), sh.WM, sh.WN, f16Suffix(xk)))
	b.Doc(fmt.Sprintf("sets y[r*n+o] to row o of the f16 matrix wh dotted with row r of x, on the tensor cores, a CTA per %dx%d block (%v).", sh.Rows(), sh.Cols(), sh))
	x, wh, y := b.Buffer("x", xk), b.Buffer("wh", k.U16), b.Buffer("y", k.F32)
	cols := b.Scalar("cols", k.Int)
	rows := b.Let("rows", x.Len().Div(cols))
	n := b.Let("n", y.Len().Div(rows))
	mt := b.Let("mt", rows.Add(sh.Rows()-1).Div(sh.Rows()))
	nt := b.Let("nt", n.Add(sh.Cols()-1).Div(sh.Cols()))
	b.ParallelFor("t", 0, mt.Mul(nt), func(t k.Expr) {
		r0 := b.Let("r0", t.Rem(mt).Mul(sh.Rows()))
		o0 := b.Let("o0", t.Div(mt).Mul(sh.Cols()))
		b.BlockMatMul(sh,
			k.TileOperand{Buf: x, Off: r0.Mul(cols), Stride: cols, Rows: rows.Sub(r0)},
			k.TileOperand{Buf: wh, Off: o0.Mul(cols), Stride: cols, Rows: n.Sub(o0)},
			cols,
			k.TileOperand{Buf: y, Off: r0.Mul(n).Add(o0), Stride: n, Rows: rows.Sub(r0)}, n.Sub(o0))
	})
	return b.MustBuild()
}
