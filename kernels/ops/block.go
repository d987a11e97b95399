// Package ops holds jitllm's kernels, each written once in the dsl/kernel
// IR. A quant type is only its BlockDecode; Dequant and MatVec are written
// once over any BlockDecode, so a new type is one decode function.
package ops

import (
	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Emit receives value i of a block (an Int expression) as an F32 expression.
type Emit func(i, v k.Expr)

// BlockDecode is one quant type's block format: QK values stored in Bytes
// bytes, decoded by Decode from the byte window blk into emit calls, in the
// order Decode chooses (it is the accumulation order of MatVec).
type BlockDecode struct {
	Name   string // "Q4_0", as in kernel names and quant.Type's String
	QK     int
	Bytes  int
	Decode func(b *k.Builder, blk *k.Buf, emit Emit)
	Sched  k.Schedule // of Decode's loops, in every kernel built from it
	F16    []int      // byte offsets of the block's f16 scales (for test data and tools)

	// Quant is value j's integer quant (I32, offset applied: nibble-8 for
	// Q4_0), for the dot kernels, which sum quants in integers and scale
	// per block. Decode is Quant·d (TestQuantIsDecode); a pure expression,
	// so a kernel can visit values in any order and unrolling folds j.
	Quant func(blk *k.Buf, j k.Expr) k.Expr
}

// Blocks lists every BlockDecode, legacy then k-quants.
func Blocks() []BlockDecode {
	return []BlockDecode{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K}
}

// Dequant is DequantNAME(src []byte, dst []float32): the row of len(dst)
// values (a multiple of QK) decoded from src.
func Dequant(d BlockDecode) *k.Kernel {
	b := k.New("Dequant" + d.Name)
	b.Doc("decodes len(dst) values (whole " + d.Name + " blocks) from src.")
	src, dst := b.Buffer("src", k.U8), b.Buffer("dst", k.F32)
	nb := b.Let("nb", dst.Len().Div(d.QK))
	b.For("blk", 0, nb, func(i k.Expr) {
		in := b.View("in", src, i.Mul(d.Bytes), d.Bytes)
		out := b.View("out", dst, i.Mul(d.QK), d.QK)
		d.Decode(b, in, func(j, v k.Expr) { b.Store(out, j, v) })
	})
	sched(b, d.Sched)
	return b.MustBuild()
}

// MatVec is MatVecNAME(w []byte, x, y []float32): y[r] = Σ_i W[r][i]·x[i]
// for the len(y) rows of W stored back to back, each len(x) values wide,
// summed in f32 in the decode's order. Rows are independent: callers split
// the work by slicing w and y.
func MatVec(d BlockDecode) *k.Kernel {
	b := k.New("MatVec" + d.Name)
	b.Doc("sets y[r] to row r of the " + d.Name + " matrix w dotted with x.")
	w, x, y := b.Buffer("w", k.U8), b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	nb := b.Let("nb", x.Len().Div(d.QK))
	rowBytes := b.Let("rowBytes", nb.Mul(d.Bytes))
	b.ParallelFor("r", 0, y.Len(), func(r k.Expr) {
		sum := b.Acc("sum", k.OpAdd, k.F(0))
		b.For("blk", 0, nb, func(i k.Expr) {
			wb := b.View("wb", w, r.Mul(rowBytes).Add(i.Mul(d.Bytes)), d.Bytes)
			xb := b.View("xb", x, i.Mul(d.QK), d.QK)
			d.Decode(b, wb, func(j, v k.Expr) { b.Fold(sum, v.Mul(xb.At(j))) })
		})
		b.Store(y, r, sum.Get())
	})
	sched(b, d.Sched)
	return b.MustBuild()
}

func sched(b *k.Builder, s k.Schedule) {
	for name, ls := range s {
		b.Schedule(name, ls)
	}
}
