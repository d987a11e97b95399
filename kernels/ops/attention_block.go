package ops

import (
	"fmt"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Prefill attention on the tensor cores (flash attention, kernel.
// BlockAttention). Arithmetic: the scores' products in f32 of f16
// operands as AttentionSplit's, but the weights rounded to f16 for their
// product with V, the sums in the hardware's order and exp the hardware's
// ex2: held to the reference by error bounds.

// AttnBlockWidth reports whether AttentionBlock takes head width hd: a
// power of two from 16 to 128 (each thread copies whole 16-byte chunks of
// the caches' rows; wider heads' outputs would not fit the registers).
func AttnBlockWidth(hd int) bool { return hd >= 16 && hd <= 128 && hd&(hd-1) == 0 }

// AttnBlockWarps is AttentionBlock's warps a CTA: 64 query rows of a head
// share each block of the caches the CTA stages.
const AttnBlockWarps = 4

// AttentionBlock is AttentionBlockD<hd>(q []float32, kc, vc []uint16, step
// []int32, y []float32, heads, group, kvDim int, scale float32): y =
// softmax attention of the step's rows (row r at position step[1]+r
// attends to positions 0..step[1]+r), q and y rows of heads·hd values, the
// caches' rows kvDim apart (head h reads kv head h/group); a CTA per
// (AttnBlockWarps·16 rows, head), the CTAs of the latest rows (the most
// positions) first, the caches' blocks staged in shared memory and each
// row's scores and output held in registers. The caches must hold
// kernel.AttnBlock−1 finite rows past the last row's position: a block's
// padding is read and weighted by zero.
func AttentionBlock(hd int) *k.Kernel { return AttentionBlockWarps(hd, AttnBlockWarps) }

// AttentionBlockWarps is AttentionBlock with CTAs of warps warps (kernel
// AttentionBlockD<hd>W<warps> unless warps is AttnBlockWarps).
func AttentionBlockWarps(hd, warps int) *k.Kernel { return attentionBlock(hd, warps, false) }

// AttentionBlockQ8_0 is AttentionBlockWarps that also quantizes its output
// as QuantizeQ8_0 does, AttentionBlockD<hd>W<warps>Q8_0(q []float32, kc, vc
// []uint16, step []int32, y []float32, xq []byte, xd []float32, heads,
// group, kvDim int, scale float32) (kernel.AttnQuant: a Q8_0 block is 4
// tiles of a row's quad of lanes), so the o projection's quantizer needs
// no launch of its own. hd is a multiple of 32.
func AttentionBlockQ8_0(hd, warps int) *k.Kernel { return attentionBlock(hd, warps, true) }

func attentionBlock(hd, warps int, q8 bool) *k.Kernel {
	if !AttnBlockWidth(hd) {
		panic(fmt.Sprintf("AttentionBlock: head width %d", hd))
	}
	sh := k.AttnShape{Warps: warps, HD: hd}
	R := sh.Rows()
	name := fmt.Sprintf("AttentionBlockD%d", hd)
	if warps != AttnBlockWarps || q8 {
		name += fmt.Sprintf("W%d", warps)
	}
	if q8 {
		name += "Q8_0"
	}
	b := k.New(name)
	b.Doc(fmt.Sprintf("attends %d rows of one head per CTA over the cache in blocks of %d positions, on the tensor cores.", R, k.AttnBlock))
	q, kc, vc := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	step, y := b.Buffer("step", k.I32), b.Buffer("y", k.F32)
	var xq, xd *k.Buf
	if q8 {
		xq, xd = b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	}
	heads, group, dim := b.Scalar("heads", k.Int), b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	scale := b.Scalar("scale", k.F32)
	qd := b.Let("qd", heads.Mul(hd))
	rows := b.Let("rows", q.Len().Div(qd))
	nq := b.Let("nq", rows.Add(R-1).Div(R))
	b.ParallelFor("c", 0, nq.Mul(heads), func(c k.Expr) {
		r0 := b.Let("r0", nq.Sub(1).Sub(c.Div(heads)).Mul(R))
		h := b.Let("h", c.Rem(heads))
		kvo := b.Let("kvo", h.Div(group).Mul(hd))
		qo := b.Let("qo", r0.Mul(qd).Add(h.Mul(hd)))
		first := b.Let("first", step.At(1).Cvt(k.Int).Add(r0).Add(1)) // positions row r0 attends to
		var quant *k.AttnQuant
		if q8 {
			quant = &k.AttnQuant{Quants: k.TileOperand{Buf: xq, Off: qo, Stride: qd},
				Scales: k.TileOperand{Buf: xd, Off: qo.Div(32), Stride: qd.Div(32)}}
		}
		b.BlockAttention(sh,
			k.TileOperand{Buf: q, Off: qo, Stride: qd, Rows: rows.Sub(r0)},
			k.TileOperand{Buf: kc, Off: kvo, Stride: dim},
			k.TileOperand{Buf: vc, Off: kvo, Stride: dim},
			k.TileOperand{Buf: y, Off: qo, Stride: qd}, first, scale, quant)
	})
	return b.MustBuild()
}

// AttentionBlockSplit is AttentionBlockSplitD<hd>(q []float32, kc, vc
// []uint16, step []int32, part []float32, heads, group, kvDim, chunks int,
// scale float32): a one-row step's attention cut over CTAs (flash-decoding
// on the tensor cores), for long positions where AttentionBlockW1's one
// CTA a head walks too many blocks in turn. Head h's n = step[1]+1
// positions are cut into chunks pieces of L = ⌈n/chunks⌉ rounded up to a
// block (kernel.AttnBlock); CTA c = h·chunks + piece attends the piece
// (kernel.BlockAttentionPart, a warp) and leaves its unnormalized output,
// maximum and sum in part from c·(hd+2), the layout AttentionSplit leaves
// for AttentionMerge (pieces past n are left empty: m = −Inf, l = 0, so
// the merge's own cut of the positions, ⌈n/chunks⌉ rounded to a warp,
// reads them as nothing). q holds one row of heads·hd values.
func AttentionBlockSplit(hd int) *k.Kernel {
	if !AttnBlockWidth(hd) {
		panic(fmt.Sprintf("AttentionBlockSplit: head width %d", hd))
	}
	sh := k.AttnShape{Warps: 1, HD: hd}
	b := k.New(fmt.Sprintf("AttentionBlockSplitD%d", hd))
	b.Doc(fmt.Sprintf("attends one piece of a head's positions per CTA over the cache in blocks of %d, on the tensor cores, leaving the piece's output, max and sum for AttentionMerge.", k.AttnBlock))
	q, kc, vc := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	step, part := b.Buffer("step", k.I32), b.Buffer("part", k.F32)
	heads, group, dim := b.Scalar("heads", k.Int), b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	chunks, scale := b.Scalar("chunks", k.Int), b.Scalar("scale", k.F32)
	n := b.Let("n", step.At(1).Cvt(k.Int).Add(1))
	per := n.Add(chunks).Sub(1).Div(chunks)
	l := b.Let("L", per.Add(k.AttnBlock-1).Div(k.AttnBlock).Mul(k.AttnBlock))
	b.ParallelFor("c", 0, heads.Mul(chunks), func(c k.Expr) {
		h := b.Let("h", c.Div(chunks))
		lo := b.Let("lo", c.Rem(chunks).Mul(l))
		kvo := b.Let("kvo", h.Div(group).Mul(hd))
		po := b.Let("po", c.Mul(hd+2))
		b.BlockAttentionPart(sh,
			k.TileOperand{Buf: q, Off: h.Mul(hd), Stride: heads.Mul(hd), Rows: k.I(1)},
			k.TileOperand{Buf: kc, Off: kvo, Stride: dim},
			k.TileOperand{Buf: vc, Off: kvo, Stride: dim},
			k.TileOperand{Buf: part, Off: po, Stride: k.I(hd + 2)}, n, lo, lo.Add(l), scale)
	})
	return b.MustBuild()
}
