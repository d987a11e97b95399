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
	a := attnBlockParams(b, q8)
	q, kc, vc, step, y, heads, group, dim, scale := a.q, a.kc, a.vc, a.step, a.y, a.heads, a.group, a.dim, a.scale
	qd := b.Let("qd", heads.Mul(hd))
	rows := b.Let("rows", q.Len().Div(qd))
	nq := b.Let("nq", rows.Add(R-1).Div(R))
	b.ParallelFor("c", 0, nq.Mul(heads), func(c k.Expr) {
		r0 := b.Let("r0", nq.Sub(1).Sub(c.Div(heads)).Mul(R))
		h := b.Let("h", c.Rem(heads))
		kvo := b.Let("kvo", h.Div(group).Mul(hd))
		qo := b.Let("qo", r0.Mul(qd).Add(h.Mul(hd)))
		first := b.Let("first", step.At(1).Cvt(k.Int).Add(r0).Add(1)) // positions row r0 attends to
		quant := a.quant(qo, qd)
		b.BlockAttention(sh,
			k.TileOperand{Buf: q, Off: qo, Stride: qd, Rows: rows.Sub(r0)},
			k.TileOperand{Buf: kc, Off: kvo, Stride: dim},
			k.TileOperand{Buf: vc, Off: kvo, Stride: dim},
			k.TileOperand{Buf: y, Off: qo, Stride: qd}, first, scale, quant)
	})
	return b.MustBuild()
}

// AttentionBlockHeads is AttentionBlockHeadsD<hd>(q []float32, kc, vc
// []uint16, step []int32, y []float32, heads, group, kvDim int, scale
// float32): a one-row step's attention (AttentionBlock's of one row) with a
// CTA of one warp for each key-value group, the group's heads the rows of
// its tiles (kernel.AttnShape.Heads; a group of more than 16 heads is cut
// in runs of 16), so each block of the caches is read once for the group
// rather than once a head. With q8 (AttentionBlockHeadsD<hd>Q8_0, hd a
// multiple of 32) it also quantizes its output as AttentionBlockQ8_0 does,
// (q, kc, vc, step, y, xq, xd, heads, group, kvDim, scale).
func AttentionBlockHeads(hd int, q8 bool) *k.Kernel { return AttentionBlockHeadsSplit(hd, q8, 1) }

// AttentionBlockHeadsSplit is AttentionBlockHeads with a CTA of warps
// warps for each key-value group's run of heads, which walk the cache's
// blocks side by side (warp w blocks w, w+warps, …; kernel.AttnShape.Split)
// and fold their results at the end: AttentionBlockHeadsD<hd>S<warps>,
// with Q8_0 output AttentionBlockHeadsD<hd>S<warps>Q8_0 (warps 1: the
// names and kernel of AttentionBlockHeads).
func AttentionBlockHeadsSplit(hd int, q8 bool, warps int) *k.Kernel {
	if !AttnBlockWidth(hd) {
		panic(fmt.Sprintf("AttentionBlockHeads: head width %d", hd))
	}
	sh := k.AttnShape{Warps: max(warps, 1), HD: hd, Heads: true, Split: warps > 1}
	R := sh.Rows()
	name := fmt.Sprintf("AttentionBlockHeadsD%d", hd)
	if sh.Split {
		name += fmt.Sprintf("S%d", warps)
	}
	if q8 {
		name += "Q8_0"
	}
	b := k.New(name)
	b.Doc(fmt.Sprintf("attends one row for a key-value group's heads per CTA over the cache in blocks of %d positions, on the tensor cores.", k.AttnBlock))
	a := attnBlockParams(b, q8)
	q, kc, vc, step, y, heads, group, dim, scale := a.q, a.kc, a.vc, a.step, a.y, a.heads, a.group, a.dim, a.scale
	first := b.Let("first", step.At(1).Cvt(k.Int).Add(1))
	runs := b.Let("runs", group.Add(R-1).Div(R)) // runs of R heads a group
	ctas := b.Let("ctas", heads.Div(group).Mul(runs))
	b.ParallelFor("c", 0, ctas, func(c k.Expr) {
		// the caches' rows up to the position, a CTA's even share of
		// them, on their way into L2 before the wait for the kernel before
		// (the q·k·v projection, which writes only the position's row):
		// past steps' rows, evicted by the weights' stream since
		cached := b.Let("cached", first.Mul(dim).Min(k.I(attnPrefetchMax)))
		lo := b.Let("lo", c.Mul(cached).Div(ctas))
		hi := b.Let("hi", c.Add(1).Mul(cached).Div(ctas))
		b.Prefetch(kc, lo, hi.Sub(lo))
		b.Prefetch(vc, lo, hi.Sub(lo))
		kvh := b.Let("kvh", c.Div(runs))
		sub := b.Let("sub", c.Rem(runs).Mul(R))
		qo := b.Let("qo", kvh.Mul(group).Add(sub).Mul(hd)) // the run's first head's values
		quant := a.quant(qo, k.I(hd))
		b.BlockAttention(sh,
			k.TileOperand{Buf: q, Off: qo, Stride: k.I(hd), Rows: group.Sub(sub).Min(R)},
			k.TileOperand{Buf: kc, Off: kvh.Mul(hd), Stride: dim},
			k.TileOperand{Buf: vc, Off: kvh.Mul(hd), Stride: dim},
			k.TileOperand{Buf: y, Off: qo, Stride: k.I(hd)}, first, scale, quant)
	})
	return b.MustBuild()
}

// AttentionBlockSplit is AttentionBlockSplitD<hd>(q []float32, kc, vc
// []uint16, step []int32, part []float32, heads, group, kvDim, chunks int,
// scale float32): a one-row step's attention cut over CTAs (flash-decoding
// on the tensor cores), for long positions where AttentionBlockW1's one
// CTA a head walks too many blocks in turn. The n = step[1]+1 positions
// are cut into chunks pieces of L = ⌈n/chunks⌉ rounded up to a block
// (kernel.AttnBlock); a CTA attends one piece for up to 16 heads of one
// key-value group at once (kernel.AttnShape.Heads: the group's query rows
// are a tile's rows, each cache block read once for all of them; a group
// of more than 16 heads is cut in runs of 16), and leaves each head h's
// unnormalized output, maximum and sum for piece p in part from
// (h·chunks + p)·(hd+2), the layout AttentionSplit leaves for
// AttentionMerge (pieces past n are left empty: m = −Inf, l = 0, so the
// merge's own cut of the positions, ⌈n/chunks⌉ rounded to a warp, reads
// them as nothing). q holds one row of heads·hd values.
func AttentionBlockSplit(hd int) *k.Kernel {
	if !AttnBlockWidth(hd) {
		panic(fmt.Sprintf("AttentionBlockSplit: head width %d", hd))
	}
	sh := k.AttnShape{Warps: 1, HD: hd, Heads: true}
	R := sh.Rows()
	b := k.New(fmt.Sprintf("AttentionBlockSplitD%d", hd))
	b.Doc(fmt.Sprintf("attends one piece of the positions for a key-value group's heads per CTA over the cache in blocks of %d, on the tensor cores, leaving each head's output, max and sum for AttentionMerge.", k.AttnBlock))
	q, kc, vc := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	// no prefetch before its wait, unlike AttentionBlockHeads: each
	// piece's first block of its group's rows prefetched made the 8B's step
	// at depth 4096 0.87 as fast on the H100 (stop 36), the 1B's at 1024 0.77
	step, part := b.Buffer("step", k.I32), b.Buffer("part", k.F32)
	heads, group, dim := b.Scalar("heads", k.Int), b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	chunks, scale := b.Scalar("chunks", k.Int), b.Scalar("scale", k.F32)
	n := b.Let("n", step.At(1).Cvt(k.Int).Add(1))
	per := n.Add(chunks).Sub(1).Div(chunks)
	l := b.Let("L", per.Add(k.AttnBlock-1).Div(k.AttnBlock).Mul(k.AttnBlock))
	runs := b.Let("runs", group.Add(R-1).Div(R)) // runs of R heads a group
	b.ParallelFor("c", 0, heads.Div(group).Mul(runs).Mul(chunks), func(c k.Expr) {
		run := b.Let("run", c.Div(chunks))
		kvh := b.Let("kvh", run.Div(runs))
		sub := b.Let("sub", run.Rem(runs).Mul(R))
		h0 := b.Let("h0", kvh.Mul(group).Add(sub)) // the run's first head
		lo := b.Let("lo", c.Rem(chunks).Mul(l))
		b.BlockAttentionPart(sh,
			k.TileOperand{Buf: q, Off: h0.Mul(hd), Stride: k.I(hd), Rows: group.Sub(sub).Min(R)},
			k.TileOperand{Buf: kc, Off: kvh.Mul(hd), Stride: dim},
			k.TileOperand{Buf: vc, Off: kvh.Mul(hd), Stride: dim},
			k.TileOperand{Buf: part, Off: h0.Mul(chunks).Add(c.Rem(chunks)).Mul(hd + 2), Stride: chunks.Mul(hd + 2)}, n, lo, lo.Add(l), scale)
	})
	return b.MustBuild()
}

// attnPrefetchMax bounds the elements of each cache the one-row attention
// prefetches into L2 before its wait (AttentionBlockHeads): 4 MiB of f16,
// which the weights' stream beside it leaves in the 50 MB L2.
const attnPrefetchMax = 2 << 20

// attnBlockArgs are the block attentions' parameters: (q, kc, vc, step, y,
// and with q8 xq, xd, then heads, group, kvDim, scale).
type attnBlockArgs struct {
	q, kc, vc, step, y, xq, xd *k.Buf
	heads, group, dim, scale   k.Expr
}

func attnBlockParams(b *k.Builder, q8 bool) attnBlockArgs {
	var a attnBlockArgs
	a.q, a.kc, a.vc = b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16)
	// the host uploads the step buffer between steps: no kernel of a step
	// writes it, so it may be read before the wait for the kernel before
	a.step, a.y = b.Buffer("step", k.I32).Settle(), b.Buffer("y", k.F32)
	if q8 {
		a.xq, a.xd = b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	}
	a.heads, a.group, a.dim = b.Scalar("heads", k.Int), b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	a.scale = b.Scalar("scale", k.F32)
	return a
}

// quant is the Q8_0 output of rows from value off, stride values apart
// (nil without xq).
func (a attnBlockArgs) quant(off, stride k.Expr) *k.AttnQuant {
	if a.xq == nil {
		return nil
	}
	return &k.AttnQuant{Quants: k.TileOperand{Buf: a.xq, Off: off, Stride: stride},
		Scales: k.TileOperand{Buf: a.xd, Off: off.Div(32), Stride: stride.Div(32)}}
}
