package exec

import (
	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
)

func (r *Runner) qRowBytes(n *dsl.Node) int {
	w := &r.m.Weights[n.Weight]
	b, _ := quant.RowBytes(quant.VecDotType(w.Type), w.Dims[0])
	return int(b)
}

// lowerMatMul computes y = W·x the way ggml's CPU backend does: each input
// row is quantized once to the weight type's dot-product partner type, then
// every output element is one VecDot of a weight row with it. Output rows are
// split over the workers; each weight row is read once for all input rows.
func (r *Runner) lowerMatMul(id int, n *dsl.Node) (func(), error) {
	w := &r.m.Weights[n.Weight]
	x, y := r.bufs[n.In[0]], r.bufs[id]
	in, out := int(w.Dims[0]), n.Cols
	vdt := quant.VecDotType(w.Type)
	qrb := r.qRowBytes(n)
	wrb := w.RowBytes()
	isOut := id == r.outID
	var lo, hi int // rows of this step that the node computes
	task := func(a, b int) {
		q := r.qbuf
		for j := a; j < b; j++ {
			wr := w.Data[j*wrb : (j+1)*wrb]
			for i := lo; i < hi; i++ {
				y[(i-lo)*out+j] = quant.VecDot(w.Type, in, wr, q[(i-lo)*qrb:(i-lo+1)*qrb])
			}
		}
	}
	return func() {
		lo, hi = 0, r.nRows
		if isOut {
			lo = r.outRow
		}
		for i := lo; i < hi; i++ {
			// llama.cpp on x86 quantizes activations with its AVX2 rounding
			// (127/amax, ties to even); matching it keeps greedy output equal.
			quant.QuantizeRowX86(vdt, x[i*in:(i+1)*in], r.qbuf[(i-lo)*qrb:(i-lo+1)*qrb])
		}
		r.pool.Run(out, 8, task)
	}, nil
}
