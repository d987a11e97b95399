package ops

import (
	"fmt"
	"strings"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Integer warp mat-vecs: the activation quantized to its partner type's
// bytes on the device (QuantizeQ8_K: int8 quants and a scale a block of
// 256; QuantizeQ8_0: a block of 32), the weight
// quants multiplied with them four at a time (k.Dot4, the GPU's dp4a) and
// summed in integers per sub-block, as ggml's k-quant dots do; only each
// unit's scaled partial is a float, summed over the warp. Against
// MatVecWarpNAME (decoded weights times the decoded activation, a float
// product a value) this reads a quarter of the activation bytes and issues
// a fraction of the instructions; the integer sums are the CPU's exactly,
// the float order is the warp's.

// QuantizeQ8_K is QuantizeQ8_K(x []float32, xq []byte, xd []float32): each
// block of 256 values of x quantized as QuantRoundQ8_K quantizes it
// (quantQ8_K: ggml's quantize_row_q8_K), the int8 quants into xq (their bytes) and the
// scale d into xd (0 for a zero block, whose quants are 0).
func QuantizeQ8_K() *k.Kernel {
	b := k.New("QuantizeQ8_K")
	b.Doc("quantizes each block of 256 values of x to Q8_K: int8 quants into xq, the scale into xd.")
	x, xq, xd := b.Buffer("x", k.F32), b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	b.ParallelFor("blk", 0, xd.Len(), func(i k.Expr) {
		storeQuantized(b, 256, i, i.Mul(256), b.View("xb", x, i.Mul(256), 256).At, xq, xd)
	})
	b.Schedule("j", k.LoopSchedule{Threads: WarpLanes})
	return b.MustBuild()
}

// storeQuantized quantizes block i of qk values (value j is at(j)) as the
// CPU matmul quantizes an activation, to Q8_K (qk 256: zero blocks
// cleared) or Q8_0 (qk 32): the int8 quants into xq from base (i·qk), the
// scale (Q8_K's 1/iscale) into xd[i].
func storeQuantized(b *k.Builder, qk int, i, base k.Expr, at func(j any) k.Expr, xq, xd *k.Buf) {
	if qk == 256 {
		q, is, zero := quantQ8_K(b, at)
		b.For("j", 0, 256, func(j k.Expr) {
			b.Store(xq, base.Add(j), k.Select(zero, k.F(0), q(j)).Cvt(k.I32).Cvt(k.U8))
		})
		b.Store(xd, i, k.Select(zero, k.F(0), k.F(1).Div(is)))
		return
	}
	q, d := quantQ8_0(b, at)
	b.For("j", 0, 32, func(j k.Expr) { b.Store(xq, base.Add(j), q(j).Cvt(k.I32).Cvt(k.U8)) })
	b.Store(xd, i, d)
}

// RMSNormQuantize is RMSNormQuantize{Q8_K,Q8_0}(x, w []float32, xq []byte,
// xd []float32, eps float32): RMSNorm(x, w) (weighted, one row) quantized
// as QuantizeQ8_K / QuantizeQ8_0 quantize it (qk 256 or 32), without the
// normalized row ever stored: a warp a block, each warp summing the whole
// row's squares itself (the row is a few KiB, read from L2), so the decode
// step's norm and its mat-vecs' activation quantizer are one launch. The
// quants and scales are those of the two kernels in turn; the f64 sum of
// squares is in the warp tree's order (RMSNormCTA's is the CTA tree's).
func RMSNormQuantize(qk int) *k.Kernel {
	name := map[int]string{256: "RMSNormQuantizeQ8_K", 32: "RMSNormQuantizeQ8_0"}[qk]
	if name == "" {
		panic("RMSNormQuantize: qk is 256 (Q8_K) or 32 (Q8_0)")
	}
	b := k.New(name)
	b.Doc(fmt.Sprintf("quantizes RMSNorm(x)·w to blocks of %d (int8 quants into xq, scales into xd).", qk))
	x, w := b.Buffer("x", k.F32), b.Buffer("w", k.F32)
	xq, xd := b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	eps := b.Scalar("eps", k.F32)
	n := b.Let("n", x.Len())
	b.ParallelFor("blk", 0, xd.Len(), func(i k.Expr) {
		ss := b.Sum("ss", k.F64, 0, n, func(j k.Expr) k.Expr {
			xj := b.Let("xj", x.At(j))
			return xj.Mul(xj).Cvt(k.F64)
		})
		mean := b.Let("mean", ss.Div(n.Cvt(k.F64)).Cvt(k.F32))
		scale := b.Let("scale", k.F(1).Div(mean.Add(eps).Sqrt()))
		base := b.Let("base", i.Mul(qk))
		// RMSNorm's bits: x·scale, then ·w
		y := func(j any) k.Expr { return x.At(base.Add(j)).Mul(scale).Mul(w.At(base.Add(j))) }
		storeQuantized(b, qk, i, base, y, xq, xd)
	})
	b.Schedule("ss_i", k.LoopSchedule{Threads: WarpLanes})
	b.Schedule("j", k.LoopSchedule{Threads: WarpLanes})
	return b.MustBuild()
}

// dotUnit returns unit s of weight block blk dotted with the block's
// activation quants xb (a qk-byte window), unscaled by the activation's d:
// an F32.
type dotUnit func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr

// dotCut is a weight block of qk values (and its activation block: the
// same qk) in bytes, cut into units.
type dotCut struct {
	qk, bytes, units int
	unit             dotUnit
}

const lowNibbles, ones = 0x0f0f0f0f, 0x01010101

// word is the little-endian u32 at byte off of a byte window whose offset
// is only even: two aligned u16 loads.
func word(blk *k.Buf, off k.Expr) k.Expr {
	return blk.Aligned(k.U16, off).Cvt(k.U32).Or(blk.Aligned(k.U16, off.Add(2)).Cvt(k.U32).Shl(16))
}

func u32c(v uint32) k.Expr { return k.Const(k.U32, int(v)) }

func i32c(v int) k.Expr { return k.Const(k.I32, v) }

// Q4_K unit s (8 a block): bytes 4s..4s+3 of each 32-byte quant group j,
// the values 64j+4s.. (low nibbles) and 64j+32+4s.. (high).
var dotQ4_KCut = dotCut{256, 144, 8, func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr {
	l4 := b.Let("l4", s.Mul(4))
	sum, mins := i32c(0), i32c(0)
	for j := 0; j < 4; j++ {
		q4 := b.Let("q4", blk.Aligned(k.U32, l4.Add(16+32*j)))
		xlo := b.Let("xlo", xb.Aligned(k.U32, l4.Add(64*j)))
		xhi := b.Let("xhi", xb.Aligned(k.U32, l4.Add(64*j+32)))
		slo := k.Dot4(q4.And(u32c(lowNibbles)), xlo, i32c(0))
		shi := k.Dot4(q4.Shr(4).And(u32c(lowNibbles)), xhi, i32c(0))
		blo := k.Dot4(u32c(ones), xlo, i32c(0))
		bhi := k.Dot4(u32c(ones), xhi, i32c(0))
		s1, m1 := scaleMinK4(blk, 4, 2*j)
		s2, m2 := scaleMinK4(blk, 4, 2*j+1)
		sum = b.Let("isum", sum.Add(slo.Mul(s1.Cvt(k.I32))).Add(shi.Mul(s2.Cvt(k.I32))))
		mins = b.Let("imin", mins.Add(blo.Mul(m1.Cvt(k.I32))).Add(bhi.Mul(m2.Cvt(k.I32))))
	}
	d, dmin := blk.F16(0), blk.F16(2)
	return d.Mul(sum.Cvt(k.F32)).Sub(dmin.Mul(mins.Cvt(k.F32)))
}}

// Q6_K unit s (8 a block): l = 4s..4s+3 of both 128-value halves n, the
// values 128n+32t+l (t = 0..3: ql, ql+32 low then high nibbles, with qh's
// bit pairs 2t) under scale 8n+2t+s/4.
var dotQ6_KCut = dotCut{256, 210, 8, func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr {
	l := b.Let("l", s.Mul(4))
	is := b.Let("is", s.Div(4))
	sum := i32c(0)
	for n := 0; n < 2; n++ {
		ql0 := b.Let("ql0", word(blk, l.Add(64*n)))
		ql32 := b.Let("ql32", word(blk, l.Add(64*n+32)))
		h := b.Let("h", word(blk, l.Add(128+32*n)))
		qs := [4]k.Expr{
			ql0.And(u32c(lowNibbles)).Or(h.And(u32c(0x03030303)).Shl(4)),
			ql32.And(u32c(lowNibbles)).Or(h.Shr(2).And(u32c(0x03030303)).Shl(4)),
			ql0.Shr(4).And(u32c(lowNibbles)).Or(h.Shr(4).And(u32c(0x03030303)).Shl(4)),
			ql32.Shr(4).And(u32c(lowNibbles)).Or(h.Shr(6).And(u32c(0x03030303)).Shl(4)),
		}
		for t, q := range qs {
			x := b.Let("x", xb.Aligned(k.U32, l.Add(128*n+32*t)))
			// (q − 32)·x, the offset taken out of the unsigned product
			st := k.Dot4(q, x, i32c(0)).Sub(k.Dot4(u32c(ones), x, i32c(0)).Mul(i32c(32)))
			sc := blk.I8(is.Add(192 + 8*n + 2*t)).Cvt(k.I32)
			sum = b.Let("isum", sum.Add(st.Mul(sc)))
		}
	}
	return blk.F16(208).Mul(sum.Cvt(k.F32))
}}

// Q8_0 unit s (2 a block): quants 16s..16s+15 as four words, signed by
// signed: the weights' bytes offset by 128 into Dot4's unsigned operand,
// the offset's 128·Σx taken out again. (Eight 4-value units a block ran
// at 162–525 GB/s on the H200: a scale load and a float product a word.)
var dotQ8_0Cut = dotCut{32, 34, 2, func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr {
	l := b.Let("l", s.Mul(16))
	sum := i32c(0)
	for c := 0; c < 4; c++ {
		q := b.Let("q", word(blk, l.Add(2+4*c)).Xor(u32c(0x80808080)))
		x := b.Let("x", xb.Aligned(k.U32, l.Add(4*c)))
		sum = b.Let("isum", sum.Add(k.Dot4(q, x, i32c(0)).Sub(k.Dot4(u32c(ones), x, i32c(0)).Mul(i32c(128)))))
	}
	return blk.F16(0).Mul(sum.Cvt(k.F32))
}}

// dotCuts are the integer warp mat-vecs' cuts by weight type name; their
// activations are Q8_K (blocks of 256) or Q8_0 (32), the weight's partner.
func dotCuts() map[string]dotCut {
	return map[string]dotCut{"Q4_K": dotQ4_KCut, "Q6_K": dotQ6_KCut, "Q8_0": dotQ8_0Cut}
}

// QuantizeQ8_0 is QuantizeQ8_0(x []float32, xq []byte, xd []float32): each
// block of 32 values of x quantized as QuantRoundQ8_0 quantizes it, the
// int8 quants into xq and the f16-rounded scale into xd.
func QuantizeQ8_0() *k.Kernel {
	b := k.New("QuantizeQ8_0")
	b.Doc("quantizes each block of 32 values of x to Q8_0 (x86 rounding): int8 quants into xq, the scale into xd.")
	x, xq, xd := b.Buffer("x", k.F32), b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	b.ParallelFor("blk", 0, xd.Len(), func(i k.Expr) {
		storeQuantized(b, 32, i, i.Mul(32), b.View("xb", x, i.Mul(32), 32).At, xq, xd)
	})
	b.Schedule("j", k.LoopSchedule{Threads: WarpLanes})
	return b.MustBuild()
}

// DotMatVecs are the integer warp mat-vecs by weight type name,
// MatVecDotNAME(w, xq []byte, xd, y []float32): y[r] = row r of the matrix
// dotted with the quantized activation (xq, xd), a warp per row.
func DotMatVecs() map[string]func() *k.Kernel { return dotFormsRows(plainStore, 1) }

// DotMatVecsRows are DotMatVecs in a store form and with rows weight rows a
// warp, MatVecDot<form><NAME> (rows 1) or MatVecDot<form><NAME>x<rows>. The
// forms: "" plain; "Add" the residual added, (w, xq, xd, res, y); "SiLU" the
// SiLU of each sum; "Mul" each sum times res (the SwiGLU's up projection
// times the gate's SiLU), (w, xq, xd, res, y). With several rows a warp the
// warp's loads for its rows are in flight together and each activation unit
// is read once for all of them; len(y) must be a multiple of rows. The same
// bits as rows 1 (each row's sum folds in the same order).
func DotMatVecsRows(form string, rows int) map[string]func() *k.Kernel {
	st, ok := map[string]warpStore{"": plainStore, "Add": residualStore, "SiLU": siluStore, "Mul": mulStore}[form]
	if !ok {
		panic("DotMatVecsRows: no store form " + form)
	}
	return dotFormsRows(st, rows)
}

func dotFormsRows(st warpStore, rows int) map[string]func() *k.Kernel {
	out := map[string]func() *k.Kernel{}
	for name, c := range dotCuts() {
		out[name] = func() *k.Kernel { return matVecDot(name, c, st, rows) }
	}
	return out
}

func matVecDot(name string, c dotCut, st warpStore, rows int) *k.Kernel {
	kname, doc := st.kernel("MatVecDot", name, "the quantized activation (xq, xd), in integers")
	if rows > 1 {
		kname += fmt.Sprintf("x%d", rows)
		doc = strings.Replace(doc, "one warp per row", fmt.Sprintf("one warp per %d rows", rows), 1)
	}
	b := k.New(kname)
	b.Doc(doc)
	w, xq, xd := b.Buffer("w", k.U8), b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	res := st.residual(b)
	y := b.Buffer("y", k.F32)
	nb := b.Let("nb", xd.Len())
	rowBytes := b.Let("rowBytes", nb.Mul(c.bytes))
	b.ParallelFor("r", 0, y.Len().Div(rows), func(g k.Expr) {
		sums := make([]*k.Var, rows)
		for q := range sums {
			sums[q] = b.Acc(fmt.Sprintf("sum%d", q), k.OpAdd, k.F(0))
		}
		b.For("u", 0, nb.Mul(c.units), func(u k.Expr) {
			i := b.Let("i", u.Div(c.units))
			xb := b.View("xb", xq, i.Mul(c.qk), c.qk)
			s := b.Let("s", u.Rem(c.units))
			for q, sum := range sums {
				r := g.Mul(rows).Add(q)
				wb := b.View("wb", w, r.Mul(rowBytes).Add(i.Mul(c.bytes)), c.bytes)
				b.Fold(sum, xd.At(i).Mul(c.unit(b, wb, xb, s)))
			}
		})
		for q, sum := range sums {
			st.store(b, y, res, g.Mul(rows).Add(q), sum.Get())
		}
	})
	warpSched(b, "u")
	return b.MustBuild()
}
