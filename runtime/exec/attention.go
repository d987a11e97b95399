package exec

import (
	"math"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
)

// lowerRoPE rotates each head's leading Dims values by its row's position
// with the generated RopeNormalSeq/RopeNeoxSeq (kernels/ops: ggml's angles,
// θ multiplied by base^(-2/dims) pair by pair in float32), one call per row.
func (r *Runner) lowerRoPE(id int, n *dsl.Node) (func(), error) {
	p := n.Rope
	a, y := r.bufs[n.In[0]], r.bufs[id]
	cols := n.Cols
	freqs, err := r.vector(p.FreqsW)
	if err != nil {
		return nil, err
	}
	if freqs == nil { // no divisors: ones, which divide exactly
		freqs = make([]float32, p.Dims/2)
		for i := range freqs {
			freqs[i] = 1
		}
	}
	thetaScale := float32(math.Pow(float64(p.Base), -2.0/float64(p.Dims)))
	rope := cpugen.RopeNormalSeq
	if p.Mode == dsl.RopeNeox {
		rope = cpugen.RopeNeoxSeq
	}
	w := p.Heads * p.HeadDim
	return func() {
		for i := 0; i < r.nRows; i++ {
			rope(a[i*cols:i*cols+w], y[i*cols:i*cols+w], r.rowPos[i:i+1], freqs,
				p.HeadDim, p.Heads, p.Dims, thetaScale, p.FreqScale)
		}
	}, nil
}

// lowerAttention appends the step's k and v rows to the layer's f16 cache
// (KVStoreSeq), then runs causal attention (AttentionSeq) one (row, head)
// pair per task: both generated from kernels/ops, whose arithmetic follows
// ggml's CPU flash attention with an f16 cache (queries rounded to f16, the
// K·Q dot in ggml_vec_dot_f16's AVX512 order, an online softmax, and the
// value accumulator kept in f16). Row r's cache slot is sequence rowSeq[r]'s.
func (r *Runner) lowerAttention(id int, n *dsl.Node) (func(), error) {
	p := n.Attn
	q, k, v := r.bufs[n.In[0]], r.bufs[n.In[1]], r.bufs[n.In[2]]
	y := r.bufs[id]
	kvDim := p.KVHeads * p.HeadDim
	group := p.Heads / p.KVHeads
	hd := p.HeadDim
	layer := n.Layer
	task := func(lo, hi int) {
		kv := &r.kv[layer]
		cpugen.AttentionSeq(q[lo*hd:hi*hd], kv.k, kv.v, y[lo*hd:hi*hd], r.rowPos, r.rowSeq,
			hd, p.Heads, group, kvDim, r.opt.Context, lo, p.Scale)
	}
	return func() {
		kv := &r.kv[layer]
		cpugen.KVStoreSeq(k[:r.nRows*kvDim], v[:r.nRows*kvDim], kv.k, kv.v, r.rowPos, r.rowSeq, kvDim, r.opt.Context)
		r.pool.Run(r.nRows*p.Heads, 4, task)
	}, nil
}
