package exec

import (
	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/quant"
)

// lowerAttentionQ8 is lowerAttention over a q8_0 cache: the generated
// KVStoreSeqQ8_0 quantizes the step's k and v rows into the layer's cache,
// then the generated AttentionSeqQ8_0 runs one (row, head) pair per task,
// each task first quantizing its query heads to Q8_0 (quant.QuantizeQ8_0Split), as
// ggml's CPU flash attention converts Q to K's vec-dot type. V is
// dequantized and accumulated in f32 (kernels/ops).
func (r *Runner) lowerAttentionQ8(id int, n *dsl.Node) (func(), error) {
	p := n.Attn
	q, k, v := r.bufs[n.In[0]], r.bufs[n.In[1]], r.bufs[n.In[2]]
	y := r.bufs[id]
	hd, layer, ctx := p.HeadDim, n.Layer, r.opt.Context
	kvDim, group := p.KVHeads*hd, p.Heads/p.KVHeads
	if need := r.opt.MaxBatch * p.Heads * hd; len(r.attnQQ) < need { // shared by the layers: one runs at a time
		r.attnQQ, r.attnQD = make([]byte, need), make([]float32, need/32)
	}
	task := func(lo, hi int) {
		kv := &r.kv[layer]
		qq, qd := r.attnQQ[lo*hd:hi*hd], r.attnQD[lo*hd/32:hi*hd/32]
		quant.QuantizeQ8_0Split(q[lo*hd:hi*hd], qq, qd)
		cpugen.AttentionSeqQ8_0(qq, qd, kv.kq, kv.ks, kv.vq, kv.vs, y[lo*hd:hi*hd], r.rowPos, r.rowSeq,
			hd, p.Heads, group, kvDim, ctx, lo, p.Scale)
	}
	store := func(lo, hi int) {
		kv := &r.kv[layer]
		cpugen.KVStoreSeqQ8_0(k[lo*kvDim:hi*kvDim], v[lo*kvDim:hi*kvDim], kv.kq, kv.vq, kv.ks, kv.vs,
			r.rowPos[lo:hi], r.rowSeq[lo:hi], kvDim, ctx)
	}
	return func() {
		r.rowsRun(r.nRows, kvDim, store)
		if n := r.nRows * p.Heads; n < 2 {
			task(0, n)
		} else {
			r.pool.Run(n, 1, task)
		}
	}, nil
}
