package ops

import (
	"fmt"
	"math"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Split attention (flash-decoding): a decode step has one query row, so
// AttentionWarp2's warp per head leaves most of the GPU idle and walks the
// cache in one serial chain. Here each (row, head) pair's positions are cut
// into `chunks` pieces of L positions, L = ⌈n/chunks⌉ rounded up to a warp,
// one warp a piece; AttentionMerge folds the pieces. The arithmetic is
// softmax attention in f32 (the f16 query and caches as Attention reads
// them), not Attention's f16 accumulator: the GPU path is held to the CPU
// one by error bounds here, as the mat-vecs are. The caches' halves widen
// by the instruction alone (F16ToF32AnyNaN: a NaN in the cache may come
// out as another NaN), a third of the q·k dot's instructions.

// AttnSplitChunks is the most pieces a pair's positions are cut into: the
// grid is pairs × AttnSplitChunks warps, those past the position exit at
// once.
const AttnSplitChunks = 32

// attnChunk is a pair's position count n (row r of the step: its position
// plus one) and the length of its pieces.
func attnChunk(b *k.Builder, step k.Expr, row, chunks k.Expr) (n, l k.Expr) {
	n = b.Let("n", step.Cvt(k.Int).Add(row).Add(1))
	per := n.Add(chunks).Sub(1).Div(chunks)
	l = b.Let("L", per.Add(WarpLanes-1).Div(WarpLanes).Mul(WarpLanes))
	return n, l
}

// AttentionSplit is AttentionSplit(q []float32, kc, vc []uint16, part []float32,
// step []int32, sc []float32, headDim, heads, group, kvDim, ctx, chunks int,
// scale float32): for warp w, pair t = w / chunks and piece c = w mod chunks
// of positions [c·L, min(n, (c+1)·L)), the scores (position on lane mod 32,
// into sc from t·ctx), their maximum m, the sum l of exp(s − m) and the
// unnormalized output o[d] = Σ exp(s − m)·v[d]; part holds o, m, l from
// w·(headDim+2).
func AttentionSplit() *k.Kernel { return attentionSplit(false) }

// AttentionSplitRounded is AttentionSplit for a query already rounded to
// f16 (RopeKVStore leaves it so): the same bits, without the two
// conversions a value and position that were most of the q·k dot's
// instructions (30 a value; a decode step's attention is one warp's
// serial dot at small positions).
func AttentionSplitRounded() *k.Kernel { return attentionSplit(true) }

func attentionSplit(rounded bool) *k.Kernel {
	name := "AttentionSplit"
	if rounded {
		name += "Rounded"
	}
	b := k.New(name)
	b.Doc("attends one piece of each head's positions per warp, leaving the piece's output, max and sum for AttentionMerge.")
	q, kc, vc, part := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16), b.Buffer("part", k.F32)
	step, sc := b.Buffer("step", k.I32), b.Buffer("sc", k.F32)
	hd, heads := b.Scalar("headDim", k.Int), b.Scalar("heads", k.Int)
	group, dim := b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	ctx, chunks := b.Scalar("ctx", k.Int), b.Scalar("chunks", k.Int)
	scale := b.Scalar("scale", k.F32)
	b.ParallelFor("w", 0, q.Len().Div(hd).Mul(chunks), func(w k.Expr) {
		t := b.Let("t", w.Div(chunks))
		c := b.Let("c", w.Rem(chunks))
		n, l := attnChunk(b, step.At(1), t.Div(heads), chunks)
		lo := b.Let("lo", c.Mul(l))
		hi := b.Let("hi", n.Min(lo.Add(l)))
		qo := b.Let("qo", t.Mul(hd))
		so := b.Let("so", t.Mul(ctx))
		off := b.Let("off", t.Rem(heads).Div(group).Mul(hd))
		M := b.Acc("M", k.OpMax, k.F(math.Inf(-1)))
		b.For("j", lo, hi, func(j k.Expr) {
			kb := b.Let("kb", j.Mul(dim).Add(off))
			dot := b.Sum("dot", k.F32, 0, hd, func(d k.Expr) k.Expr {
				qd := q.At(qo.Add(d))
				if !rounded {
					qd = qd.F32ToF16().F16ToF32()
				}
				return qd.Mul(kc.At(kb.Add(d)).F16ToF32AnyNaN())
			})
			s := b.Let("s", dot.Mul(scale))
			b.Store(sc, so.Add(j), s)
			b.Fold(M, s)
		})
		m := b.Let("m", M.Get())
		S := b.Acc("S", k.OpAdd, k.F(0))
		b.For("je", lo, hi, func(j k.Expr) {
			e := b.Let("e", sc.At(so.Add(j)).Sub(m).Exp())
			b.Store(sc, so.Add(j), e)
			b.Fold(S, e)
		})
		po := b.Let("po", w.Mul(hd.Add(2)))
		b.For("d", 0, hd, func(d k.Expr) {
			o := b.Sum("o", k.F32, lo, hi, func(j k.Expr) k.Expr {
				return sc.At(so.Add(j)).Mul(vc.At(j.Mul(dim).Add(off).Add(d)).F16ToF32AnyNaN())
			})
			b.Store(part, po.Add(d), o)
		})
		// every lane alike: the same values to the same addresses
		b.Store(part, po.Add(hd), m)
		b.Store(part, po.Add(hd).Add(1), S.Get())
	})
	warpSched(b, "j", "je", "d")
	// a lane's q·k dot and output sums: several loads in flight (the same
	// order, so the same bits)
	b.Schedule("dot_i", k.LoopSchedule{Unroll: 32}) // 8 and the whole dot measured within 5% (TestGPUAttentionSplitDecode)
	b.Schedule("o_i", k.LoopSchedule{Unroll: 4})
	return b.MustBuild()
}

// AttentionMerge is AttentionMerge(part []float32, step []int32, y
// []float32, headDim, heads, chunks int): each pair's pieces of
// AttentionSplit folded, y[d] = Σ_c o_c[d]·exp(m_c − M) / Σ_c l_c·exp(m_c − M)
// over the pieces that hold positions, M their largest maximum; a warp a
// pair, first a lane a piece storing the piece's weight exp(m_c − M) past
// the pieces (part is AttnPartLen long), then head dimensions over the
// lanes, mergeLaneValues of them a lane in one walk of the pieces.
func AttentionMerge() *k.Kernel { return attentionMerge(0) }

// AttentionMergeQ8_0 is AttentionMerge that also quantizes its output as
// QuantizeQ8_0 does, AttentionMergeQ8_0(part []float32, step []int32, y
// []float32, xq []byte, xd []float32, headDim, heads, chunks int): a Q8_0
// block of 32 values is a lane each of one warp's head (headDim a multiple
// of 32), so the o projection's quantizer needs no launch of its own. The
// bits of AttentionMerge, then QuantizeQ8_0.
func AttentionMergeQ8_0() *k.Kernel { return attentionMerge(32) }

// AttentionMergeQ8_K is AttentionMerge that also quantizes its output as
// QuantizeQ8_K does, AttentionMergeQ8_K(part []float32, step []int32, y
// []float32, xq []byte, xd []float32, headDim, heads, chunks int): a CTA
// of 256 a Q8_K block, a thread a value folding its head's pieces (the
// head's maximum and denominator each thread of it alike), then the
// block quantized as QuantizeQ8_K's CTA does. The bits of AttentionMerge,
// then QuantizeQ8_K; len(y) a multiple of 256.
func AttentionMergeQ8_K() *k.Kernel { return attentionMerge(256) }

// AttnPartLen is the length of the part buffer AttentionSplit (or
// AttentionBlockSplit) and AttentionMerge share for pairs (row, head)
// pairs in chunks pieces of headDim values: each piece's unnormalized
// output, maximum and sum, then a weight a piece that the merge computes
// (mergeWeights) and reads back.
func AttnPartLen(pairs, chunks, headDim int) int { return pairs * chunks * (headDim + 3) }

// mergePieces is where pair t's pieces lie in part: nc of them hold
// positions, each stride values (its output, maximum and sum) from base,
// their weights from wbase.
func mergePieces(b *k.Builder, step *k.Buf, hd, heads, chunks, pairs, t k.Expr) (nc, stride, base, wbase k.Expr) {
	n, l := attnChunk(b, step.At(1), t.Div(heads), chunks)
	nc = b.Let("nc", n.Add(l).Sub(1).Div(l))
	stride = b.Let("stride", hd.Add(2))
	base = b.Let("base", t.Mul(chunks).Mul(stride))
	wbase = b.Let("wbase", pairs.Mul(chunks).Mul(stride).Add(t.Mul(chunks)))
	return nc, stride, base, wbase
}

// mergeWeights stores pair t's piece weights exp(m_c − M) after the pieces
// in part, a piece a thread of the group (the cooperative loop "wc"), M
// their largest maximum: each weight's exp (f64, correctly rounded: what
// the merge spends its time on) computed once, where every lane computing
// every piece's weight in turn took ~0.4 µs a piece (H100). The loop's
// stores are ordered before the group's later loads (a cooperative loop
// that stores ends with the group's barrier).
func mergeWeights(b *k.Builder, part, step *k.Buf, hd, heads, chunks, pairs, t k.Expr) {
	nc, stride, base, wbase := mergePieces(b, step, hd, heads, chunks, pairs, t)
	b.For("wc", 0, nc, func(c k.Expr) {
		M := b.Acc("M", k.OpMax, k.F(math.Inf(-1)))
		b.For("cm", 0, chunks, func(c k.Expr) { // every piece, those past nc as −Inf (see mergeHead)
			b.Set(M, M.Get().Max(k.Select(c.Lt(nc), part.At(base.Add(c.Mul(stride)).Add(hd)), math.Inf(-1))))
		})
		b.Store(part, wbase.Add(c), part.At(base.Add(c.Mul(stride)).Add(hd)).Sub(M.Get()).Exp())
	})
}

// mergeHead is head t's fold of its pieces, their weights already stored
// by mergeWeights: fold(d0, n) is values d0 to d0+n-1 of the head's
// attention output, out(d) value d alone. Its loops walk all chunks
// pieces (a constant where the kernel is specialized), the nc − chunks
// that hold no positions adding +0 (the same sums: no sum here is −0), so
// that an unrolled walk issues every piece's loads at once; walking nc
// pieces, the loads of a rolled remainder each waited out L2's latency.
func mergeHead(b *k.Builder, part, step *k.Buf, hd, heads, chunks, pairs, t k.Expr) (out func(d k.Expr) k.Expr, fold func(d0 k.Expr, n int) []k.Expr) {
	nc, stride, base, wbase := mergePieces(b, step, hd, heads, chunks, pairs, t)
	den := b.Sum("den", k.F32, 0, chunks, func(c k.Expr) k.Expr {
		return k.Select(c.Lt(nc), part.At(base.Add(c.Mul(stride)).Add(hd).Add(1)).Mul(part.At(wbase.Add(c))), 0)
	})
	inv := b.Let("inv", k.F(1).Div(den))
	// values d0..d0+n-1 folded in one walk of the pieces (each value's sum
	// in the pieces' order, whatever n)
	fold = func(d0 k.Expr, nv int) []k.Expr {
		accs := make([]*k.Var, nv)
		for v := range accs {
			accs[v] = b.Acc(fmt.Sprintf("o%d", v), k.OpAdd, k.F(0))
		}
		b.For("piece", 0, chunks, func(c k.Expr) {
			pc := b.Let("pc", base.Add(c.Mul(stride)))
			in := b.Let("in", c.Lt(nc))
			w := b.Let("w", part.At(wbase.Add(c)))
			for v, a := range accs {
				b.Fold(a, k.Select(in, part.At(pc.Add(d0).Add(v)).Mul(w), 0))
			}
		})
		vals := make([]k.Expr, nv)
		for v, a := range accs {
			vals[v] = a.Get().Mul(inv)
		}
		return vals
	}
	out = func(d k.Expr) k.Expr { return fold(d, 1)[0] }
	return out, fold
}

// mergeLaneValues is how many of a head's values a lane of the warp merge
// folds in one walk of the pieces, each piece's weight loaded once for
// them all.
const mergeLaneValues = 4

// attentionMerge is AttentionMerge quantizing its output to blocks of qk
// (32: Q8_0, 256: Q8_K) or not (0).
func attentionMerge(qk int) *k.Kernel {
	name, doc := "AttentionMerge", "folds AttentionSplit's pieces of each head into its attention output"
	if qk > 0 {
		name, doc = map[int]string{32: "AttentionMergeQ8_0", 256: "AttentionMergeQ8_K"}[qk], doc+", quantized too"
	}
	b := k.New(name)
	b.Doc(doc + ".")
	part, step, y := b.Buffer("part", k.F32), b.Buffer("step", k.I32), b.Buffer("y", k.F32)
	var xq, xd *k.Buf
	if qk > 0 {
		xq, xd = b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	}
	hd, heads, chunks := b.Scalar("headDim", k.Int), b.Scalar("heads", k.Int), b.Scalar("chunks", k.Int)
	pairs := b.Let("pairs", y.Len().Div(hd))
	if qk == 256 {
		b.ParallelFor("blk", 0, y.Len().Div(256), func(blk k.Expr) {
			base := b.Let("at", blk.Mul(256))
			// the weights of the heads the block holds values of (a head
			// that straddles two blocks gets the same weights from each)
			b.For("wh", base.Div(hd), base.Add(255).Div(hd).Add(1), func(t k.Expr) {
				mergeWeights(b, part, step, hd, heads, chunks, pairs, t)
			})
			b.For("v", 0, 256, func(v k.Expr) {
				e := b.Let("e", base.Add(v))
				out, _ := mergeHead(b, part, step, hd, heads, chunks, pairs, e.Div(hd))
				b.Store(y, e, out(e.Rem(hd)))
			})
			storeQuantized(b, 256, blk, base, b.View("yb", y, base, 256).At, xq, xd)
		})
		b.Schedule("v", k.LoopSchedule{Threads: 256})
		b.Schedule("j", k.LoopSchedule{Threads: 256})
		b.Schedule("wc", k.LoopSchedule{Threads: 256})
		unrollMerge(b, "cm", "den_i", "piece")
		return b.MustBuild()
	}
	b.ParallelFor("t", 0, pairs, func(t k.Expr) {
		mergeWeights(b, part, step, hd, heads, chunks, pairs, t)
		out, fold := mergeHead(b, part, step, hd, heads, chunks, pairs, t)
		// mergeLaneValues a lane at a time, then the rest one at a time
		groups := b.Let("groups", hd.Div(mergeLaneValues))
		b.For("g", 0, groups, func(g k.Expr) {
			d0 := b.Let("d0", g.Mul(mergeLaneValues))
			for v, x := range fold(d0, mergeLaneValues) {
				b.Store(y, t.Mul(hd).Add(d0).Add(v), x)
			}
		})
		b.For("d", groups.Mul(mergeLaneValues), hd, func(d k.Expr) { b.Store(y, t.Mul(hd).Add(d), out(d)) })
		if qk == 0 {
			return
		}
		// each block of 32 quantized from y as QuantizeQ8_0 reads it (the
		// loops' stores are ordered before)
		b.For("qb", 0, hd.Div(32), func(qb k.Expr) {
			blk := b.Let("blk", t.Mul(hd).Add(qb.Mul(32)))
			storeQuantized(b, 32, blk.Div(32), blk, b.View("yb", y, blk, 32).At, xq, xd)
		})
	})
	warpSched(b, "wc", "g", "d", "j")
	unrollMerge(b, "cm", "den_i", "piece")
	return b.MustBuild()
}

// unrollMerge gives mergeHead's loops over the pieces their loads in
// flight together: each iteration's loads are independent, but rolled, a
// lane waits out a load's latency a piece. The same order, so the same
// bits. 16: the first long step's pieces in one trip (decodeSplits).
func unrollMerge(b *k.Builder, loops ...string) {
	for _, l := range loops {
		b.Schedule(l, k.LoopSchedule{Unroll: 16})
	}
}
