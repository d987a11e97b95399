package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// The k-quants: 256-value super-blocks with 6-bit packed sub-block scales
// (ggml-common.h), little-endian:
//
//	Q4_K (144): d f16, dmin f16, scales[12] (8 × 6-bit scale, 8 × 6-bit min), qs[128]
//	Q6_K (210): ql[128] (low 4 bits), qh[64] (high 2 bits), scales int8[16], d f16
//
// Go loops here run at build time (the scale unpacking differs per
// sub-block); the IR loops are the per-value ones.

var kLanes = k.Schedule{"l": {Lanes: 4}}

// scaleMinK4 is ggml's get_scale_min_k4: sub-block j's 6-bit scale and min,
// from the twelve bytes at byte at of blk.
func scaleMinK4(blk *k.Buf, at, j int) (sc, m k.Expr) {
	q := func(i int) k.Expr { return blk.U8(at + i) }
	if j < 4 {
		return q(j).And(63), q(j + 4).And(63)
	}
	return q(j + 4).And(0xf).Or(q(j - 4).Shr(6).Shl(4)), q(j + 4).Shr(4).Or(q(j).Shr(6).Shl(4))
}

var Q4_K = BlockDecode{Name: "Q4_K", QK: 256, Bytes: 144, F16: []int{0, 2}, Sched: kLanes,
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		d, dmin := b.Let("d", blk.F16(0)), b.Let("dmin", blk.F16(2))
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(blk, 4, 2*j)
			s2, m2 := scaleMinK4(blk, 4, 2*j+1)
			d1, mm1 := b.Let("d1", d.Mul(s1.Cvt(k.F32))), b.Let("m1", dmin.Mul(m1.Cvt(k.F32)))
			d2, mm2 := b.Let("d2", d.Mul(s2.Cvt(k.F32))), b.Let("m2", dmin.Mul(m2.Cvt(k.F32)))
			b.For("l", 0, 32, func(l k.Expr) {
				q := b.Let("q", blk.U8(l.Add(16+32*j)))
				emit(l.Add(64*j), d1.Mul(q.And(0xf).Cvt(k.F32)).Sub(mm1))
				emit(l.Add(64*j+32), d2.Mul(q.Shr(4).Cvt(k.F32)).Sub(mm2))
			})
		}
	}}

var Q6_K = BlockDecode{Name: "Q6_K", QK: 256, Bytes: 210, F16: []int{208}, Sched: kLanes,
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) { q6kBody(b, blk, b.Let("d", blk.F16(208)), emit) }}

// q6kQuants are a Q6_K position's four 6-bit quants (values l, l+32,
// l+64, l+96 of a 128-value half, offset by 32) from its ql byte, the byte
// 32 on and its qh byte.
func q6kQuants(ql0, ql32, h k.Expr) [4]k.Expr {
	return [4]k.Expr{
		ql0.And(0xf).Or(h.And(3).Shl(4)),
		ql32.And(0xf).Or(h.Shr(2).And(3).Shl(4)),
		ql0.Shr(4).Or(h.Shr(4).And(3).Shl(4)),
		ql32.Shr(4).Or(h.Shr(6).And(3).Shl(4)),
	}
}

// q6kBody decodes a Q6_K block's 256 values from its body (ql, qh and the
// scales: the block's first 208 bytes) and its scale d.
func q6kBody(b *k.Builder, blk *k.Buf, d k.Expr, emit Emit) {
	for n := 0; n < 2; n++ {
		b.For("l", 0, 32, func(l k.Expr) {
			ql0, ql32 := b.Let("ql0", blk.U8(l.Add(64*n))), b.Let("ql32", blk.U8(l.Add(64*n+32)))
			h := b.Let("h", blk.U8(l.Add(128+32*n)))
			for t, q := range q6kQuants(ql0, ql32, h) {
				// value 128n + 32t + l has scale (128n + 32t + l)/16; ggml: d·sc, then ·q
				sc := blk.I8(l.Div(16).Add(192 + 8*n + 2*t)).Cvt(k.F32)
				emit(l.Add(128*n+32*t), d.Mul(sc).Mul(q.Cvt(k.I32).Sub(32).Cvt(k.F32)))
			}
		})
	}
}
