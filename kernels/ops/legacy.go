package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// The legacy 32-value blocks (ggml-common.h), little-endian:
//
//	Q4_0: d f16, qs[16]            v = (nibble-8)·d; low nibbles are values 0..15, high 16..31
//	Q4_1: d f16, m f16, qs[16]     v = nibble·d + m
//	Q5_0: d f16, qh u32, qs[16]    bit j of qh is value j's fifth bit; v = (q-16)·d
//	Q5_1: d f16, m f16, qh u32, qs[16]
//	Q8_0: d f16, qs int8[32]       v = q·d
//
// Each step rounds to f32 as ggml's reference does (d·q, then + m).

// nibble is value j of 32 packed from byte at: the low nibble of byte j for
// j < 16, the high nibble of byte j-16 after.
func nibble(blk *k.Buf, at int, j k.Expr) k.Expr {
	return blk.U8(j.Rem(16).Add(at)).Shr(j.Div(16).Mul(4)).And(0xf).Cvt(k.I32)
}

// five is a Q5 value: its nibble from the quants after qh (the u32 at
// qhAt) and its fifth bit, bit j of qh.
func five(blk *k.Buf, qhAt int, j k.Expr) k.Expr {
	h := blk.U32(qhAt).Shr(j).And(1).Shl(4).Cvt(k.I32)
	return nibble(blk, qhAt+4, j).Or(h)
}

// lanes marks the decode loop's iterations as independent.
var lanes = k.Schedule{"j": {Lanes: 4}}

var Q4_0 = BlockDecode{Name: "Q4_0", QK: 32, Bytes: 18, F16: []int{0}, Sched: lanes,
	Quant: func(blk *k.Buf, j k.Expr) k.Expr { return nibble(blk, 2, j).Sub(8) },
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		d := b.Let("d", blk.F16(0))
		b.For("j", 0, 16, func(j k.Expr) {
			q := b.Let("q", blk.U8(j.Add(2)))
			emit(j, q.And(0xf).Cvt(k.I32).Sub(8).Cvt(k.F32).Mul(d))
			emit(j.Add(16), q.Shr(4).Cvt(k.I32).Sub(8).Cvt(k.F32).Mul(d))
		})
	}}

var Q4_1 = BlockDecode{Name: "Q4_1", QK: 32, Bytes: 20, F16: []int{0, 2}, Sched: lanes,
	Quant: func(blk *k.Buf, j k.Expr) k.Expr { return nibble(blk, 4, j) },
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		d, m := b.Let("d", blk.F16(0)), b.Let("m", blk.F16(2))
		b.For("j", 0, 16, func(j k.Expr) {
			q := b.Let("q", blk.U8(j.Add(4)))
			emit(j, q.And(0xf).Cvt(k.F32).Mul(d).Add(m))
			emit(j.Add(16), q.Shr(4).Cvt(k.F32).Mul(d).Add(m))
		})
	}}

// q5 is the shared body of Q5_0 and Q5_1: qh at byte qhAt, quants after it.
func q5(b *k.Builder, blk *k.Buf, qhAt int, value func(q k.Expr) k.Expr, emit Emit) {
	qh := b.Let("qh", blk.U32(qhAt))
	b.For("j", 0, 16, func(j k.Expr) {
		q := b.Let("q", blk.U8(j.Add(qhAt+4)))
		h0 := qh.Shr(j).Shl(4).Cvt(k.U8).And(0x10)
		h1 := qh.Shr(j.Add(12)).Cvt(k.U8).And(0x10)
		emit(j, value(q.And(0xf).Or(h0)))
		emit(j.Add(16), value(q.Shr(4).Or(h1)))
	})
}

var Q5_0 = BlockDecode{Name: "Q5_0", QK: 32, Bytes: 22, F16: []int{0}, Sched: lanes,
	Quant: func(blk *k.Buf, j k.Expr) k.Expr { return five(blk, 2, j).Sub(16) },
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		d := b.Let("d", blk.F16(0))
		q5(b, blk, 2, func(q k.Expr) k.Expr { return q.Cvt(k.I32).Sub(16).Cvt(k.F32).Mul(d) }, emit)
	}}

var Q5_1 = BlockDecode{Name: "Q5_1", QK: 32, Bytes: 24, F16: []int{0, 2}, Sched: lanes,
	Quant: func(blk *k.Buf, j k.Expr) k.Expr { return five(blk, 4, j) },
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		d, m := b.Let("d", blk.F16(0)), b.Let("m", blk.F16(2))
		q5(b, blk, 4, func(q k.Expr) k.Expr { return q.Cvt(k.F32).Mul(d).Add(m) }, emit)
	}}

var Q8_0 = BlockDecode{Name: "Q8_0", QK: 32, Bytes: 34, F16: []int{0}, Sched: lanes,
	Quant: func(blk *k.Buf, j k.Expr) k.Expr { return blk.I8(j.Add(2)).Cvt(k.I32) },
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		d := b.Let("d", blk.F16(0))
		b.For("j", 0, 32, func(j k.Expr) {
			emit(j, blk.I8(j.Add(2)).Cvt(k.F32).Mul(d))
		})
	}}
