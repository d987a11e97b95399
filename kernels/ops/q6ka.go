package ops

import (
	"fmt"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Q6_KA is Q6_K laid out for 16-byte loads, the GPU's copy of a Q6_K
// matrix whose rows hold whole groups of Q6_KAGroup blocks
// (runtime/gpuexec repacks them at upload with RepackQ6_KA). A Q6_K block
// is 210 bytes, so every other block starts only 2-byte aligned and a
// mat-vec must read it in halves; eight blocks (1680 bytes, a multiple of
// 16) regrouped as their eight 208-byte bodies (ql, qh, scales), each
// 16-byte aligned, then their eight f16 scales d. The values and their
// order are Q6_K's, group by group.
var Q6_KA = BlockDecode{Name: "Q6_KA", QK: Q6_KAGroup * 256, Bytes: Q6_KAGroup * 210, F16: q6kaScales(), Sched: kLanes,
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		b.For("g", 0, Q6_KAGroup, func(g k.Expr) {
			body := b.View("body", blk, g.Mul(q6kBodyBytes), q6kBodyBytes)
			d := b.Let("d", blk.F16(g.Mul(2).Add(q6kaD)))
			q6kBody(b, body, d, func(i, v k.Expr) { emit(g.Mul(256).Add(i), v) })
		})
	}}

const (
	Q6_KAGroup   = 8                         // Q6_K blocks a Q6_KA block
	q6kBodyBytes = 208                       // a Q6_K block but its d
	q6kaD        = Q6_KAGroup * q6kBodyBytes // the byte offset of a Q6_KA block's d's
)

func q6kaScales() []int {
	out := make([]int, Q6_KAGroup)
	for j := range out {
		out[j] = q6kaD + 2*j
	}
	return out
}

// RepackQ6_KA writes the Q6_K blocks of src into dst as Q6_KA blocks;
// len(src) must be a whole number of Q6_KA blocks (a matrix whose rows
// hold a multiple of Q6_KAGroup blocks) and len(dst) the same.
func RepackQ6_KA(dst, src []byte) error {
	if len(src)%Q6_KA.Bytes != 0 || len(dst) != len(src) {
		return fmt.Errorf("Q6_KA: %d bytes into %d: not whole groups of %d Q6_K blocks", len(src), len(dst), Q6_KAGroup)
	}
	for g := 0; g < len(src); g += Q6_KA.Bytes {
		for j := range Q6_KAGroup {
			blk := src[g+210*j : g+210*(j+1)]
			copy(dst[g+q6kBodyBytes*j:], blk[:q6kBodyBytes])
			copy(dst[g+q6kaD+2*j:], blk[q6kBodyBytes:])
		}
	}
	return nil
}

// Q6_KA's integer mat-vec unit s (four a Q6_K block, 32 a Q6_KA block):
// the values 128n+32t+l, t = 0..3, of body g = s/4, half n = s/2 mod 2,
// l = 16·(s mod 2) .. +15: sixteen bytes of each of ql, ql+32 and qh (three
// 16-byte loads), four of the activation's, four scales. Against Q6_K's
// unit (two-byte loads of four bytes of each) a quarter of the load
// instructions a weight byte.
var dotQ6_KACut = dotCut{Q6_KA.QK, Q6_KA.Bytes, 4 * Q6_KAGroup, func(b *k.Builder, blk, xb *k.Buf, s k.Expr) k.Expr {
	u := q6kaUnit(b, blk, xb, s)
	sum := i32c(0)
	for t := range 4 {
		sum = b.Let("isum", sum.Add(u.st[t].Mul(u.sc[t])))
	}
	return u.d.Mul(sum.Cvt(k.F32))
}, Q6_KAGroup, nil}

// dotQ6_KAQ8_0Cut is dotQ6_KACut against an activation quantized to Q8_0
// (a scale a block of 32: QuantizeQ8_0, or a producer that quantizes its
// own output so): each of the unit's four runs of 16 values is in block
// 8g+4n+t of the activation's, its integer sum scaled by that block's
// scale, as llama.cpp's CUDA k-quant dots take Q8_1. Not the CPU's bits
// (it quantizes to Q8_K).
var dotQ6_KAQ8_0Cut = dotCut{qk: Q6_KA.QK, bytes: Q6_KA.Bytes, units: 4 * Q6_KAGroup, scales: Q6_KA.QK / 32,
	scaled: func(b *k.Builder, blk, xb *k.Buf, s k.Expr, xs func(k.Expr) k.Expr) k.Expr {
		u := q6kaUnit(b, blk, xb, s)
		first := b.Let("xs0", s.Div(4).Mul(8).Add(s.Div(2).And(1).Mul(4))) // block 8g+4n
		sum := k.F(0)
		for t := range 4 {
			sum = b.Let("fsum", sum.Add(xs(first.Add(t)).Mul(u.st[t].Mul(u.sc[t]).Cvt(k.F32))))
		}
		return u.d.Mul(sum)
	}}

// q6kaSums are a Q6_KA unit's parts: its block's d, and for each run t of
// its sixteen values their integer sum against the activation's quants and
// their 8-bit scale.
type q6kaSums struct {
	d      k.Expr
	st, sc [4]k.Expr
}

// q6kaUnit is Q6_KA unit s (dotQ6_KACut's).
func q6kaUnit(b *k.Builder, blk, xb *k.Buf, s k.Expr) q6kaSums {
	g := b.Let("g", s.Div(4))
	n := b.Let("n", s.Div(2).And(1))
	l := b.Let("l", s.And(1).Mul(16))
	ql := b.Let("ql", g.Mul(q6kBodyBytes).Add(n.Mul(64)).Add(l)) // ql's bytes; ql+32 at +32
	qh := b.Let("qh", g.Mul(q6kBodyBytes).Add(n.Mul(32)).Add(l)) // qh's at +128
	xo := b.Let("xo", g.Mul(256).Add(n.Mul(128)).Add(l))         // the values' activation quants, t at +32t
	sc := b.Let("scb", g.Mul(q6kBodyBytes).Add(n.Mul(8)).Add(l.Div(16)))
	var u q6kaSums
	for t := range 4 {
		st := i32c(0)
		for c := range 4 {
			lo := b.Let("qlo", blk.Aligned(k.U32, ql.Add(32*(t&1)+4*c)))
			h := b.Let("h", blk.Aligned(k.U32, qh.Add(128+4*c)))
			q := lo.Shr(4 * (t >> 1)).And(u32c(lowNibbles)).Or(h.Shr(2 * t).And(u32c(0x03030303)).Shl(4))
			x := b.Let("x", xb.Aligned(k.U32, xo.Add(32*t+4*c)))
			// (q − 32)·x, the offset taken out of the unsigned product
			st = b.Let("st", k.Dot4(q, x, st).Sub(k.Dot4(u32c(ones), x, i32c(0)).Mul(i32c(32))))
		}
		u.st[t], u.sc[t] = st, blk.I8(sc.Add(192+2*t)).Cvt(k.I32)
	}
	u.d = blk.Aligned(k.U16, g.Mul(2).Add(q6kaD)).F16ToF32()
	return u
}
