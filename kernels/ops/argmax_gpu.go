package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// ArgMaxCTA is ArgMaxF32(x []float32, y []int32): y[0] = the first index
// of x's largest value (greedy sampling on the device, so that a step
// returns 4 bytes instead of the logits), over one CTA of NormThreads
// threads: the maximum first, then the least index holding it. With NaN in
// x the result is unspecified. len(x) must be at least 1.
func ArgMaxCTA() *k.Kernel {
	b := k.New("ArgMaxF32")
	b.Doc("sets y[0] to the first index of the largest value of x.")
	x, y := b.Buffer("x", k.F32), b.Buffer("y", k.I32)
	n := b.Let("n", x.Len())
	mx := b.Acc("mx", k.OpMax, x.At(0))
	b.For("am", 0, n, func(i k.Expr) { b.Fold(mx, x.At(i)) })
	m := b.Let("m", mx.Get())
	ix := b.Acc("ix", k.OpMin, n)
	b.For("ai", 0, n, func(i k.Expr) { b.Fold(ix, k.Select(x.At(i).Eq(m), i, n)) })
	b.Store(y, 0, ix.Get().Cvt(k.I32))
	b.Schedule("am", k.LoopSchedule{Threads: NormThreads})
	b.Schedule("ai", k.LoopSchedule{Threads: NormThreads})
	return b.MustBuild()
}
