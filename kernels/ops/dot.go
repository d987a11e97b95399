package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// The row dot products of the CPU matmul, DotNAME(n int, w, x []byte)
// float32: a weight row of n values against the activation row quantized to
// its partner type (ggml's vec_dot_type). The algorithm is ggml's generic C
// reference (ggml-cpu quants.c *_generic, vec.cpp scalar path): integer
// block sums, then the float combination written exactly as ggml writes it.
// The SIMD builds' orders are not other kernels but Orders of these ones
// (dotorder.go).

// Partner is an activation block format: QK int8 quants at byte Qs of
// each Bytes-byte block.
type Partner struct {
	Name          string
	QK, Bytes, Qs int
}

var (
	PQ8_0 = Partner{"Q8_0", 32, 34, 2}   // d f16, qs[32]
	PQ8_1 = Partner{"Q8_1", 32, 36, 4}   // d f16, s f16 (d·Σqs), qs[32]
	PQ8_K = Partner{"Q8_K", 256, 292, 4} // d f32, qs[256], bsums int16[16] at 260
)

// Dot is one row-dot kernel and what it pairs.
type Dot struct {
	Kernel *k.Kernel
	W      string // weight type name, as quant.Type's String
	X      string // activation (partner) type name
	QK     int    // n must be a multiple of it
}

// xq is the product of weight quant q (I32) and activation quant j.
func xq(xb *k.Buf, p Partner, q, j k.Expr) k.Expr {
	return q.Mul(xb.I8(j.Add(p.Qs)).Cvt(k.I32))
}

// legacyDot is Σ over blocks of combine(Σ_j Quant(w, j)·x_j): the scales
// are Lets made before the integer sum, so an Order can split the sum.
func legacyDot(d BlockDecode, p Partner, scales func(b *k.Builder, wb, xb *k.Buf) func(s k.Expr) k.Expr) *k.Kernel {
	b := k.New("Dot" + d.Name)
	b.Doc("is the dot product of n " + d.Name + " weights in w with the " + p.Name + " row x, as ggml's generic kernel.")
	n := b.Scalar("n", k.Int)
	w, x := b.Buffer("w", k.U8), b.Buffer("x", k.U8)
	sum := b.Acc("sum", k.OpAdd, k.F(0))
	b.For("blk", 0, n.Div(d.QK), func(i k.Expr) {
		wb := b.View("wb", w, i.Mul(d.Bytes), d.Bytes)
		xb := b.View("xb", x, i.Mul(p.Bytes), p.Bytes)
		combine := scales(b, wb, xb)
		s := b.Acc("s", k.OpAdd, k.Const(k.I32, 0))
		b.For("j", 0, d.QK, func(j k.Expr) { b.Fold(s, xq(xb, p, d.Quant(wb, j), j)) })
		b.Fold(sum, combine(s.Get().Cvt(k.F32)))
	})
	b.Return(sum.Get())
	b.Schedule("j", k.LoopSchedule{Unroll: d.QK}) // constant offsets into both blocks
	return b.MustBuild()
}

// dW·dX, the block's scale product, as ggml forms it.
func dd(b *k.Builder, wb, xb *k.Buf) k.Expr { return b.Let("d", wb.F16(0).Mul(xb.F16(0))) }

// The generic kernels' float combinations differ per type; each is ggml's.
var (
	// sumi*d_x*d_y, left to right
	dotQ4_0 = func() *k.Kernel {
		return legacyDot(Q4_0, PQ8_0, func(b *k.Builder, wb, xb *k.Buf) func(s k.Expr) k.Expr {
			dw, dx := b.Let("dw", wb.F16(0)), b.Let("dx", xb.F16(0))
			return func(s k.Expr) k.Expr { return s.Mul(dw).Mul(dx) }
		})
	}
	// (d_x*d_y)*sumi + m_x*s_y
	withMin = func(b *k.Builder, wb, xb *k.Buf) func(s k.Expr) k.Expr {
		d := dd(b, wb, xb)
		m := b.Let("m", wb.F16(2).Mul(xb.F16(2)))
		return func(s k.Expr) k.Expr { return d.Mul(s).Add(m) }
	}
	// (d_x*d_y)*sumi
	scaleFirst = func(b *k.Builder, wb, xb *k.Buf) func(s k.Expr) k.Expr {
		d := dd(b, wb, xb)
		return func(s k.Expr) k.Expr { return d.Mul(s) }
	}
	// sumi*(d_x*d_y)
	scaleLast = func(b *k.Builder, wb, xb *k.Buf) func(s k.Expr) k.Expr {
		d := dd(b, wb, xb)
		return func(s k.Expr) k.Expr { return s.Mul(d) }
	}
)

// i16 sign-extends a U16 load to I32 (Q8_K's bsums).
func i16(u k.Expr) k.Expr { return u.Cvt(k.I32).Shl(16).Shr(16) }

// kDot is the k-quant shape of ggml's generic kernels: per super-block, the
// integer lanes aux32[l] = Σ_c sc(c)·q[8c+l]·y[8c+l], each scaled by d in
// float into its own sums[l] (the default Order), minus the mins term.
func kDot(name string, bytes int, body func(b *k.Builder, wb, xb *k.Buf, sum *k.Var)) *k.Kernel {
	b := k.New("Dot" + name)
	b.Doc("is the dot product of n " + name + " weights in w with the Q8_K row x, as ggml's generic kernel.")
	n := b.Scalar("n", k.Int)
	w, x := b.Buffer("w", k.U8), b.Buffer("x", k.U8)
	sum := b.Acc("sum", k.OpAdd, k.F(0))
	b.For("blk", 0, n.Div(256), func(i k.Expr) {
		wb := b.View("wb", w, i.Mul(bytes), bytes)
		xb := b.View("xb", x, i.Mul(PQ8_K.Bytes), PQ8_K.Bytes)
		body(b, wb, xb, sum)
	})
	b.Return(sum.Get())
	// ggml keeps float sums[8], one per integer lane, added to sumf at the end
	b.Schedule("sum", k.LoopSchedule{Order: k.Order{Lanes: 8, LaneLoop: "l", Tree: k.TreeSerial}})
	return b.MustBuild()
}

func dotQ4_K() *k.Kernel {
	return kDot("Q4_K", Q4_K.Bytes, func(b *k.Builder, wb, xb *k.Buf, sum *k.Var) {
		yd := b.Let("yd", xb.F32(0))
		d, dmin := b.Let("d", wb.F16(0).Mul(yd)), b.Let("dmin", wb.F16(2).Mul(yd))
		var sc, mn [8]k.Expr
		for j := range sc {
			s, m := scaleMinK4(wb, 4, j)
			sc[j], mn[j] = b.Let("sc", s.Cvt(k.I32)), b.Let("mn", m.Cvt(k.I32))
		}
		b.For("l", 0, 8, func(l k.Expr) {
			aux := b.Acc("aux", k.OpAdd, k.Const(k.I32, 0))
			for c := 0; c < 32; c++ { // value 8c+l: sub-block c/4, nibble (c/4)%2 of qs[32(c/8) + 8(c%4) + l]
				sb := c / 4
				q := b.Let("q", wb.U8(l.Add(16+32*(sb/2)+8*(c%4))).Shr(4*(sb%2)).And(0xf).Cvt(k.I32))
				b.Fold(aux, sc[sb].Mul(xq(xb, PQ8_K, q, l.Add(8*c))))
			}
			b.Fold(sum, d.Mul(aux.Get().Cvt(k.F32)))
		})
		mins := b.Acc("mins", k.OpAdd, k.Const(k.I32, 0))
		for j := 0; j < 16; j++ {
			b.Fold(mins, i16(xb.U16(260+2*j)).Mul(mn[j/2]))
		}
		b.Fold(sum, dmin.Mul(mins.Get().Cvt(k.F32)).Neg()) // sumf -= dmin*sumi
	})
}

func dotQ6_K() *k.Kernel {
	return kDot("Q6_K", Q6_K.Bytes, func(b *k.Builder, wb, xb *k.Buf, sum *k.Var) {
		d := b.Let("d", wb.F16(208).Mul(xb.F32(0)))
		var sc [16]k.Expr
		for j := range sc {
			sc[j] = b.Let("sc", wb.I8(192+j).Cvt(k.I32))
		}
		b.For("l", 0, 8, func(l k.Expr) {
			aux := b.Acc("aux", k.OpAdd, k.Const(k.I32, 0))
			for c := 0; c < 32; c++ { // value 8c+l, as Q6_K's Decode lays it out
				half, t, off := c/16, (c%16)/4, 8*(c%4)
				ql := wb.U8(l.Add(64*half + 32*(t%2) + off)).Shr(4 * (t / 2)).And(0xf)
				qh := wb.U8(l.Add(128 + 32*half + off)).Shr(2 * t).And(3).Shl(4)
				q := b.Let("q", ql.Or(qh).Cvt(k.I32).Sub(32))
				b.Fold(aux, sc[c/2].Mul(xq(xb, PQ8_K, q, l.Add(8*c))))
			}
			b.Fold(sum, d.Mul(aux.Get().Cvt(k.F32)))
		})
	})
}

// floatDot is ggml's scalar ggml_vec_dot_f32/_f16: each product rounded to
// f32, summed in double (ggml_float).
func floatDot(name string, size int, load func(buf *k.Buf, off k.Expr) k.Expr) *k.Kernel {
	b := k.New("Dot" + name)
	b.Doc("is the dot product of the n-value " + name + " rows w and x, as ggml's scalar kernel.")
	n := b.Scalar("n", k.Int)
	w, x := b.Buffer("w", k.U8), b.Buffer("x", k.U8)
	sum := b.Acc("sum", k.OpAdd, k.D(0))
	b.For("i", 0, n, func(i k.Expr) {
		o := i.Mul(size)
		b.Fold(sum, load(w, o).Mul(load(x, o)).Cvt(k.F64))
	})
	b.Return(sum.Get().Cvt(k.F32))
	b.Schedule("i", k.LoopSchedule{Unroll: 4})
	return b.MustBuild()
}

func dotF32() *k.Kernel {
	return floatDot("F32", 4, func(buf *k.Buf, o k.Expr) k.Expr { return buf.F32(o) })
}

func dotF16() *k.Kernel {
	return floatDot("F16", 2, func(buf *k.Buf, o k.Expr) k.Expr { return buf.F16(o) })
}
