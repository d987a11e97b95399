package ops

import (
	"math"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// AttentionWarp2 is AttentionWarp2(q []float32, kc, vc []uint16, y []float32,
// step []int32, sc []float32, headDim, heads, group, kvDim, ctx int, scale
// float32): Attention, bit for bit, with one warp per (row, head) and the
// scores computed first, position j on lane j mod 32 (each lane sums its
// q·k_j in Attention's order), into sc[t·ctx+j]; then Attention's online
// softmax walks the positions, reading the scores back, with head
// dimension d on lane d mod 32 running the whole recurrence for d (its
// accumulator in a register; one exp a position: exp(M−s) and exp(s−M)
// are the same call on −|s−M|, and Attention uses one of them). sc holds
// ctx scores for each pair.
func AttentionWarp2() *k.Kernel {
	b := k.New("AttentionWarp2")
	b.Doc("attends each head of each row of q over the f16 KV caches up to the row's position, one warp per head, scores first.")
	q, kc, vc, y := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16), b.Buffer("y", k.F32)
	step, sc := b.Buffer("step", k.I32), b.Buffer("sc", k.F32)
	hd, heads := b.Scalar("headDim", k.Int), b.Scalar("heads", k.Int)
	group, dim := b.Scalar("group", k.Int), b.Scalar("kvDim", k.Int)
	ctx := b.Scalar("ctx", k.Int)
	scale := b.Scalar("scale", k.F32)
	f16 := func(v k.Expr) k.Expr { return v.F32ToF16().F16ToF32() }
	b.ParallelFor("t", 0, q.Len().Div(hd), func(t k.Expr) {
		qo := b.Let("qo", t.Mul(hd))
		so := b.Let("so", t.Mul(ctx))
		n := b.Let("n", step.At(1).Cvt(k.Int).Add(t.Div(heads)).Add(1))
		off := b.Let("off", t.Rem(heads).Div(group).Mul(hd))
		b.For("j", 0, n, func(j k.Expr) {
			kb := b.Let("kb", j.Mul(dim).Add(off))
			dot := b.Sum("dot", k.F64, 0, hd, func(d k.Expr) k.Expr {
				return f16(q.At(qo.Add(d))).Mul(kc.At(kb.Add(d)).F16ToF32()).Cvt(k.F64)
			})
			b.Store(sc, so.Add(j), dot.Cvt(k.F32).Mul(scale))
		})
		// each lane runs the recurrence for its own dimensions, the
		// accumulator in a register
		b.For("d", 0, hd, func(d k.Expr) {
			M := b.Acc("M", k.OpMax, k.F(math.Inf(-1)))
			S := b.Acc("S", k.OpAdd, k.F(0))
			acc := b.Acc("acc", k.OpAdd, k.F(0))
			b.For("p", 0, n, func(p k.Expr) {
				s := b.Let("s", sc.At(so.Add(p)))
				v := b.Let("v", vc.At(p.Mul(dim).Add(off).Add(d)).F16ToF32())
				m := b.Let("m", M.Get())
				gt := b.Let("gt", s.Gt(m))
				e := b.Let("e", k.Select(gt, m.Sub(s), s.Sub(m)).Exp())
				// at p = 0 the exp is of -inf: ggml's 0 is selected, as in Attention
				ms := b.Let("ms", k.Select(p.Eq(0), k.F(0), k.Select(gt, e, k.F(1))))
				vs := b.Let("vs", k.Select(gt, k.F(1), e))
				b.Set(M, k.Select(gt, s, m))
				a := b.Let("a", k.Select(gt, f16(acc.Get().Mul(ms)), acc.Get()))
				b.Set(acc, f16(v.FMA(vs, a)))
				b.Set(S, S.Get().Mul(ms).Add(vs))
			})
			b.Store(y, qo.Add(d), acc.Get().Mul(k.F(1).Div(S.Get())))
		})
	})
	warpSched(b, "j", "d")
	return b.MustBuild()
}
