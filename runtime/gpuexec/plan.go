// Package gpuexec runs a model's graph on one CUDA GPU. Every kernel is a
// dsl/kernel kernel of kernels/ops rendered to PTX at run time for the
// device found (no hand-written CUDA); weights are uploaded once in their
// stored quant layout; buffers are planned once; a step is one token, and
// its launches are captured into a CUDA graph replayed for every position
// (the token id and position live in a small device buffer). See docs/gpu.md.
package gpuexec

import (
	"fmt"
	"math"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
)

// alloc is one device allocation of n elements of kind: an activation slot,
// a weight (init holds its bytes), a KV cache or the step buffer.
type alloc struct {
	name string
	kind kernel.Kind
	n    int
	init []byte // uploaded once; nil: zeroed
}

// view is elements [off, off+n) of allocation a.
type view struct{ a, off, n int }

// launch is one kernel call: per parameter a view (buffers) or an int or
// float32 (scalars), in k.Params order.
type launch struct {
	k    *kernel.Kernel
	args []any
	node int
}

// plan is a graph lowered for a one-row step, independent of any device.
type plan struct {
	allocs   []alloc
	launches []launch
	step     int  // the I32 allocation [token, position]
	logits   view // the last node's output
	vocab    int
	context  int
	embRows  int // rows of the embedding matrix (the token ids accepted)
}

// The step buffer's views: the token id and the position.
var (
	stepTok = func(p *plan) view { return view{p.step, 0, 1} }
	stepAll = func(p *plan) view { return view{p.step, 0, 2} }
)

func (p *plan) add(a alloc) int { p.allocs = append(p.allocs, a); return len(p.allocs) - 1 }

func (p *plan) call(node int, k *kernel.Kernel, args ...any) {
	p.launches = append(p.launches, launch{k: k, args: args, node: node})
}

func whole(a int, p *plan) view { return view{a, 0, p.allocs[a].n} }

// blocks maps a quant type to its BlockDecode.
func blockOf(t quant.Type) (ops.BlockDecode, bool) {
	for _, d := range ops.Blocks() {
		if d.Name == t.String() {
			return d, true
		}
	}
	return ops.BlockDecode{}, false
}

// newPlan lowers m's graph for one row per step with a KV cache of context
// positions.
func newPlan(m *exec.Model, context int) (*plan, error) {
	g := m.Graph
	p := &plan{context: context, vocab: m.VocabSize()}
	p.step = p.add(alloc{name: "step", kind: kernel.I32, n: 2})

	// activation slots by liveness, as runtime/exec plans them (one row a step)
	bp := g.PlanBuffers(1)
	slotAlloc := make([]int, len(bp.Sizes))
	for i, n := range bp.Sizes {
		slotAlloc[i] = p.add(alloc{name: fmt.Sprintf("slot%d", i), kind: kernel.F32, n: n})
	}
	out := make([]view, len(g.Nodes))
	for i, n := range g.Nodes {
		if s := bp.Slot[i]; s >= 0 {
			out[i] = view{slotAlloc[s], 0, n.Cols}
		}
	}

	weights := map[int]int{} // weight index -> raw allocation
	raw := func(wi int) int {
		if a, ok := weights[wi]; ok {
			return a
		}
		w := &m.Weights[wi]
		a := p.add(alloc{name: w.GGUF, kind: kernel.U8, n: len(w.Data), init: w.Data})
		weights[wi] = a
		return a
	}
	vector := func(wi int) (int, error) {
		w := &m.Weights[wi]
		v := make([]float32, w.Dims[0])
		if err := quant.Dequantize(w.Type, w.Data, v); err != nil {
			return 0, fmt.Errorf("weight %s: %w", w.GGUF, err)
		}
		return p.add(alloc{name: w.GGUF + " (f32)", kind: kernel.F32, n: len(v), init: f32Bytes(v)}), nil
	}
	scratch := -1 // activations rounded to a matmul's partner type
	kvs := map[int][2]int{}
	kernels := map[string]*kernel.Kernel{}
	cached := func(name string, mk func() *kernel.Kernel) *kernel.Kernel {
		if k, ok := kernels[name]; ok {
			return k
		}
		k := mk()
		kernels[name] = k
		return k
	}

	for i, n := range g.Nodes {
		in := func(j int) view { return out[n.In[j]] }
		switch n.Op {
		case dsl.OpTokens:
		case dsl.OpEmbed:
			w := &m.Weights[n.Weight]
			p.embRows = int(w.Dims[1])
			var k *kernel.Kernel
			switch w.Type {
			case quant.F32, quant.F16:
				f16 := w.Type == quant.F16
				k = cached("Embed"+w.Type.String(), func() *kernel.Kernel { return ops.EmbedFloat(f16) })
			default:
				d, ok := blockOf(w.Type)
				if !ok {
					return nil, fmt.Errorf("node %d (embed): no GPU kernel decodes %s (%s)", i, w.Type, w.GGUF)
				}
				k = cached("Embed"+d.Name, func() *kernel.Kernel { return ops.Embed(d) })
			}
			p.call(i, k, whole(raw(n.Weight), p), stepTok(p), out[i], n.Cols)
		case dsl.OpMatMul:
			w := &m.Weights[n.Weight]
			x := in(0)
			var k *kernel.Kernel
			switch w.Type {
			case quant.F32:
				k = cached("MatVecF32", ops.MatVecF32)
			case quant.F16:
				k = cached("MatVecF16", ops.MatVecF16)
			default:
				d, ok := blockOf(w.Type)
				if !ok {
					return nil, fmt.Errorf("node %d (matmul): no GPU kernel multiplies %s (%s)", i, w.Type, w.GGUF)
				}
				var rk *kernel.Kernel
				switch quant.VecDotType(w.Type) {
				case quant.Q8_0, quant.Q8_1:
					rk = cached("QuantRoundQ8_0", ops.QuantRoundQ8_0)
				case quant.Q8_K:
					rk = cached("QuantRoundQ8_K", ops.QuantRoundQ8_K)
				default:
					return nil, fmt.Errorf("node %d (matmul): no activation rounding for %s", i, w.Type)
				}
				if scratch < 0 {
					scratch = p.add(alloc{name: "quantized activations", kind: kernel.F32})
				}
				p.allocs[scratch].n = max(p.allocs[scratch].n, x.n)
				sx := view{scratch, 0, x.n}
				p.call(i, rk, x, sx)
				x = sx
				k = cached("MatVec"+d.Name, func() *kernel.Kernel { return ops.MatVec(d) })
			}
			p.call(i, k, whole(raw(n.Weight), p), x, out[i])
		case dsl.OpAdd:
			p.call(i, cached("AddF32", ops.AddF32), in(0), in(1), out[i])
		case dsl.OpMul:
			p.call(i, cached("MulF32", ops.MulF32), in(0), in(1), out[i])
		case dsl.OpScale:
			p.call(i, cached("ScaleF32", ops.ScaleF32), in(0), out[i], n.F)
		case dsl.OpSiLU:
			p.call(i, cached("SiLUF32", ops.SiLUF32), in(0), out[i])
		case dsl.OpRMSNorm:
			if n.Weight < 0 {
				p.call(i, cached("RMSNormNoWeight", func() *kernel.Kernel { return ops.RMSNorm(false) }), in(0), out[i], n.F)
				break
			}
			wv, err := vector(n.Weight)
			if err != nil {
				return nil, err
			}
			p.call(i, cached("RMSNorm", func() *kernel.Kernel { return ops.RMSNorm(true) }), in(0), whole(wv, p), out[i], n.F)
		case dsl.OpRoPE:
			r := n.Rope
			half := r.Dims / 2
			freqs := make([]float32, half)
			for j := range freqs {
				freqs[j] = 1
			}
			if r.FreqsW >= 0 {
				w := &m.Weights[r.FreqsW]
				v := make([]float32, w.Dims[0])
				if err := quant.Dequantize(w.Type, w.Data, v); err != nil {
					return nil, fmt.Errorf("weight %s: %w", w.GGUF, err)
				}
				if len(v) < half {
					return nil, fmt.Errorf("rope frequencies %s hold %d values, need %d", w.GGUF, len(v), half)
				}
				copy(freqs, v)
			}
			fa := p.add(alloc{name: fmt.Sprintf("rope freqs node %d", i), kind: kernel.F32, n: half, init: f32Bytes(freqs)})
			ts := float32(math.Pow(float64(r.Base), -2.0/float64(r.Dims)))
			mode, dims := r.Mode, r.Dims
			if mode != dsl.RopeNormal && mode != dsl.RopeNeox {
				return nil, fmt.Errorf("node %d: rope mode %d", i, mode)
			}
			k := cached(fmt.Sprintf("rope%d/%d", mode, dims), func() *kernel.Kernel { return ops.RopePos(mode, dims) })
			p.call(i, k, in(0), out[i], stepAll(p), whole(fa, p), r.HeadDim, r.Heads, ts, r.FreqScale)
		case dsl.OpAttention:
			a := n.Attn
			dim := a.KVHeads * a.HeadDim
			if n.Layer < 0 {
				return nil, fmt.Errorf("node %d: attention outside a block", i)
			}
			if _, dup := kvs[n.Layer]; dup {
				return nil, fmt.Errorf("node %d: a second attention in block %d", i, n.Layer)
			}
			kc := p.add(alloc{name: fmt.Sprintf("k cache %d", n.Layer), kind: kernel.U16, n: context * dim})
			vc := p.add(alloc{name: fmt.Sprintf("v cache %d", n.Layer), kind: kernel.U16, n: context * dim})
			kvs[n.Layer] = [2]int{kc, vc}
			p.call(i, cached("KVStore", ops.KVStore), in(1), in(2), whole(kc, p), whole(vc, p), stepAll(p), dim)
			p.call(i, cached("Attention", ops.Attention), in(0), whole(kc, p), whole(vc, p), out[i], stepAll(p),
				a.HeadDim, a.Heads, a.Heads/a.KVHeads, dim, a.Scale)
		default:
			return nil, fmt.Errorf("node %d: op %s has no GPU kernel yet", i, n.Op)
		}
	}
	id, ok := g.Outputs["logits"]
	if !ok {
		return nil, fmt.Errorf("the graph has no logits output")
	}
	p.logits = out[id]
	return p, nil
}

// kernelList is every distinct kernel the plan launches, in first-use order.
func (p *plan) kernelList() []*kernel.Kernel {
	seen := map[*kernel.Kernel]bool{}
	var ks []*kernel.Kernel
	for _, l := range p.launches {
		if !seen[l.k] {
			seen[l.k] = true
			ks = append(ks, l.k)
		}
	}
	return ks
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// Kernels lists the kernels the runner renders for m: what NewRunner
// compiles for the device, available without one (for tools and tests).
func Kernels(m *exec.Model) ([]*kernel.Kernel, error) {
	p, err := newPlan(m, 1)
	if err != nil {
		return nil, err
	}
	return p.kernelList(), nil
}
