package ops

import (
	"math"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// AttentionWarp2 is AttentionWarp2(q []float32, kc, vc []uint16, y []float32,
// step []int32, sc []float32, headDim, heads, group, kvDim, ctx int, scale
// float32): Attention, bit for bit, with one warp per (row, head) in four
// phases over sc's 2·ctx floats for pair t (from t·2·ctx):
//   - the scores, position j on lane j mod 32 (each lane sums its q·k_j in
//     Attention's order), into sc[j];
//   - the running maximum before each position, M_{p−1} (−inf first), by
//     every lane alike (a compare a position, no exp), into sc[ctx+p];
//   - the online softmax's two factors a position, position p on lane p
//     mod 32: exp(M−s) and exp(s−M) are the same call on −|s−M| and
//     Attention uses one of them, so ms (the old sums' scale: 0 at p = 0,
//     else e where s > M, else 1) goes to sc[ctx+p] and vs (the value's:
//     1 where s > M, else e) to sc[p];
//   - the recurrence acc = f16(v·vs + f16(acc·ms)), S = S·ms + vs with
//     head dimension d on lane d mod 32, its accumulator in a register.
//     Attention keeps acc where s ≤ M; f16(acc·1) is acc (already an f16
//     value), so the product stands for that select.
//
// The exps are spread over the lanes instead of each lane running one a
// position on its own dependency chain.
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
		so := b.Let("so", t.Mul(ctx).Mul(2))
		mo := b.Let("mo", so.Add(ctx))
		n := b.Let("n", step.At(1).Cvt(k.Int).Add(t.Div(heads)).Add(1))
		off := b.Let("off", t.Rem(heads).Div(group).Mul(hd))
		b.For("j", 0, n, func(j k.Expr) {
			kb := b.Let("kb", j.Mul(dim).Add(off))
			dot := b.Sum("dot", k.F64, 0, hd, func(d k.Expr) k.Expr {
				return f16(q.At(qo.Add(d))).Mul(kc.At(kb.Add(d)).F16ToF32()).Cvt(k.F64)
			})
			b.Store(sc, so.Add(j), dot.Cvt(k.F32).Mul(scale))
		})
		// every lane alike: the same values to the same addresses, each
		// lane reading back its own stores
		M := b.Acc("M", k.OpMax, k.F(math.Inf(-1)))
		b.For("pm", 0, n, func(p k.Expr) {
			s := b.Let("s", sc.At(so.Add(p)))
			m := b.Let("m", M.Get())
			b.Store(sc, mo.Add(p), m)
			b.Set(M, k.Select(s.Gt(m), s, m))
		})
		b.For("pe", 0, n, func(p k.Expr) {
			s := b.Let("s", sc.At(so.Add(p)))
			m := b.Let("m", sc.At(mo.Add(p)))
			gt := b.Let("gt", s.Gt(m))
			e := b.Let("e", k.Select(gt, m.Sub(s), s.Sub(m)).Exp())
			// at p = 0 the exp is of -inf: ggml's 0 is selected, as in Attention
			b.Store(sc, mo.Add(p), k.Select(p.Eq(0), k.F(0), k.Select(gt, e, k.F(1))))
			b.Store(sc, so.Add(p), k.Select(gt, k.F(1), e))
		})
		b.For("d", 0, hd, func(d k.Expr) {
			S := b.Acc("S", k.OpAdd, k.F(0))
			acc := b.Acc("acc", k.OpAdd, k.F(0))
			b.For("p", 0, n, func(p k.Expr) {
				ms := b.Let("ms", sc.At(mo.Add(p)))
				vs := b.Let("vs", sc.At(so.Add(p)))
				v := b.Let("v", vc.At(p.Mul(dim).Add(off).Add(d)).F16ToF32())
				b.Set(acc, f16(v.FMA(vs, f16(acc.Get().Mul(ms)))))
				b.Set(S, S.Get().Mul(ms).Add(vs))
			})
			b.Store(y, qo.Add(d), acc.Get().Mul(k.F(1).Div(S.Get())))
		})
	})
	warpSched(b, "j", "pe", "d")
	b.Schedule("pm", k.LoopSchedule{Unroll: 8})
	b.Schedule("p", k.LoopSchedule{Unroll: 4})
	return b.MustBuild()
}
