package ops

import (
	"math"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// The q8_0 KV cache (llama.cpp's -ctk q8_0 -ctv q8_0) of the CPU backend:
// each block of 32 values of a K or V row is int8 quants and an f16 scale,
// kept in two arrays per cache (quants kq at the value's index of an f16
// cache, scales ks at value index / 32) so a row's quants stay contiguous.

// KVStoreSeqQ8_0 is KVStoreSeqQ8_0(k, v []float32, kq, vq []byte, ks, vs
// []uint16, rowPos, rowSeq []int32, kvDim, ctx int): KVStoreSeq into a
// q8_0 cache. Each block of 32 values of a row is quantized as QuantizeQ8_0
// quantizes it (x86 rounding: q = round_even(v·127/amax), the scale
// amax/127 rounded to f16): its quants go to kq (vq) from the block's first
// value index, its scale's f16 bits to ks (vs) at the block's index.
// kvDim must be a multiple of 32.
func KVStoreSeqQ8_0() *k.Kernel {
	b := k.New("KVStoreSeqQ8_0")
	b.Doc("stores the rows of k and v, quantized to q8_0 blocks, into the caches at each row's sequence and position.")
	kx, vx := b.Buffer("k", k.F32), b.Buffer("v", k.F32)
	kq, vq := b.Buffer("kq", k.U8), b.Buffer("vq", k.U8)
	ks, vs := b.Buffer("ks", k.U16), b.Buffer("vs", k.U16)
	rp, rs := b.Buffer("rowPos", k.I32), b.Buffer("rowSeq", k.I32)
	dim, ctx := b.Scalar("kvDim", k.Int), b.Scalar("ctx", k.Int)
	b.ParallelFor("blk", 0, kx.Len().Div(32), func(i k.Expr) {
		nb := b.Let("nb", dim.Div(32))
		row := b.Let("row", i.Div(nb))
		slot := b.Let("slot", rs.At(row).Cvt(k.Int).Mul(ctx).Add(rp.At(row).Cvt(k.Int)))
		at := b.Let("at", slot.Mul(nb).Add(i.Rem(nb))) // the block's index in the cache
		for _, c := range []struct{ x, q, s *k.Buf }{{kx, kq, ks}, {vx, vq, vs}} {
			q, d := quantQ8_0(b, b.View("xb", c.x, i.Mul(32), 32).At)
			out := b.View("qb", c.q, at.Mul(32), 32)
			b.For("j", 0, 32, func(j k.Expr) { b.Store(out, j, q(j).Cvt(k.I32).Cvt(k.U8)) })
			b.Store(c.s, at, d.F32ToF16()) // d is f16-rounded already: exact
		}
	})
	return b.MustBuild()
}

// AttentionSeqQ8_0 is AttentionSeqQ8_0(qq []byte, qd []float32, kq []byte,
// ks []uint16, vq []byte, vs []uint16, y []float32, rowPos, rowSeq []int32,
// headDim, heads, group, kvDim, ctx, t0 int, scale float32): AttentionSeq
// over KVStoreSeqQ8_0's caches, with the arithmetic of ggml's CPU flash
// attention when K and V are q8_0. The query arrives as K's vec-dot type,
// Q8_0 from QuantizeQ8_0 (qq its int8 quants, qd each block's scale; pair
// t0+t's from t·headDim); the score of cached position j is s = (Σ_b
// (qd_b·ks_b)·Σ_i qq_i·kq_i)·scale, each block's integer sum exact, the
// blocks summed in f32 in order (ggml_vec_dot_q8_0_q8_0's generic order).
// The online softmax is AttentionSeq's, but V is dequantized to f32
// (vq_i·vs_b, exact) and the accumulator stays f32: acc·ms when the
// maximum rises, then acc = fma(v_j, vs, acc); finally y = acc·(1/S).
// headDim must be a multiple of 32.
func AttentionSeqQ8_0() *k.Kernel {
	b := k.New("AttentionSeqQ8_0")
	b.Doc("attends each (row, head) pair from pair t0 on, its query quantized to Q8_0, over its sequence's q8_0 KV caches up to the row's position.")
	qq, qd := b.Buffer("qq", k.U8), b.Buffer("qd", k.F32)
	kq, ks := b.Buffer("kq", k.U8), b.Buffer("ks", k.U16)
	vq, vsc := b.Buffer("vq", k.U8), b.Buffer("vs", k.U16)
	y := b.Buffer("y", k.F32)
	rp, rs := b.Buffer("rowPos", k.I32), b.Buffer("rowSeq", k.I32)
	hd, heads := b.Scalar("headDim", k.Int), b.Scalar("heads", k.Int)
	group, dim := b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	ctx, t0 := b.Scalar("ctx", k.Int), b.Scalar("t0", k.Int)
	scale := b.Scalar("scale", k.F32)
	b.ParallelFor("t", 0, y.Len().Div(hd), func(t k.Expr) {
		qo := b.Let("qo", t.Mul(hd))
		nb := b.Let("nb", hd.Div(32))
		pr := b.Let("pr", t0.Add(t))
		row := b.Let("row", pr.Div(heads))
		pos := b.Let("pos", rp.At(row).Cvt(k.Int))
		off := b.Let("off", rs.At(row).Cvt(k.Int).Mul(ctx).Mul(dim).Add(pr.Rem(heads).Div(group).Mul(hd)))
		b.For("d", 0, hd, func(d k.Expr) { b.Store(y, qo.Add(d), k.F(0)) })
		M := b.Acc("M", k.OpMax, k.F(math.Inf(-1)))
		S := b.Acc("S", k.OpAdd, k.F(0))
		b.For("j", 0, pos.Add(1), func(j k.Expr) {
			kb := b.Let("kb", j.Mul(dim).Add(off)) // the position's first value: its quants' byte, 32× its first scale's index
			dot := b.Acc("dot", k.OpAdd, k.F(0))
			b.For("kblk", 0, nb, func(c k.Expr) {
				qb := b.View("qb", qq, qo.Add(c.Mul(32)), 32)
				kbq := b.View("kbq", kq, kb.Add(c.Mul(32)), 32)
				isum := b.Acc("isum", k.OpAdd, k.Const(k.I32, 0))
				b.For("i", 0, 32, func(i k.Expr) { b.Fold(isum, qb.I8(i).Cvt(k.I32).Mul(kbq.I8(i).Cvt(k.I32))) })
				d := b.Let("dd", qd.At(qo.Div(32).Add(c)).Mul(ks.At(kb.Div(32).Add(c)).F16ToF32()))
				b.Fold(dot, d.Mul(isum.Get().Cvt(k.F32)))
			})
			s := b.Let("s", dot.Get().Mul(scale))
			m := b.Let("m", M.Get())
			gt := b.Let("gt", s.Gt(m))
			first := b.Let("first", j.Eq(0))
			// one exp a position: exp(M - s) when s is the new maximum (ms),
			// else exp(s - M) (vs); at j = 0 it is exp(-inf), ggml's 0
			ex := b.Let("ex", k.Select(gt, m.Sub(s), s.Sub(m)).Exp())
			ms := b.Let("ms", k.Select(first, k.F(0), k.Select(gt, ex, k.F(1))))
			vs := b.Let("vs", k.Select(gt, k.F(1), ex))
			b.Set(M, k.Select(gt, s, m))
			// the rescale runs only when the maximum rose (a loop of 0 trips else)
			b.For("r", 0, k.Select(gt, hd, k.I(0)), func(d k.Expr) { b.Store(y, qo.Add(d), y.At(qo.Add(d)).Mul(ms)) })
			b.For("vblk", 0, nb, func(c k.Expr) {
				vd := b.Let("vd", vsc.At(kb.Div(32).Add(c)).F16ToF32())
				vbq := b.View("vbq", vq, kb.Add(c.Mul(32)), 32)
				yb := b.View("yb", y, qo.Add(c.Mul(32)), 32)
				b.For("e", 0, 32, func(e k.Expr) {
					b.Store(yb, e, vbq.I8(e).Cvt(k.F32).Mul(vd).FMA(vs, yb.At(e)))
				})
			})
			b.Set(S, S.Get().Mul(ms).Add(vs))
		})
		inv := b.Let("inv", k.F(1).Div(S.Get()))
		b.For("d", 0, hd, func(d k.Expr) { b.Store(y, qo.Add(d), y.At(qo.Add(d)).Mul(inv)) })
	})
	// constant offsets into the 32-byte blocks
	b.Schedule("i", k.LoopSchedule{Unroll: 32})
	b.Schedule("e", k.LoopSchedule{Unroll: 32})
	return b.MustBuild()
}
