package exec

import (
	"fmt"
	"math"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/quant"
)

// lower turns one node into a kernel closure specialized for its shapes and
// weight type. Closures are made once, at plan time; they read the current
// step's size from the runner.
func (r *Runner) lower(id int, n *dsl.Node) (func(), error) {
	g := r.m.Graph
	y := r.bufs[id]
	cols := n.Cols
	in := func(k int) ([]float32, int) { return r.bufs[n.In[k]], g.Nodes[n.In[k]].Cols }
	switch n.Op {
	case dsl.OpTokens, dsl.OpRows: // inputs: StageStep fills a stage's rows
		return func() {}, nil
	case dsl.OpEmbed:
		w := &r.m.Weights[n.Weight]
		rb := w.RowBytes()
		decode := dequantizer(w.Type)
		rows := func(lo, hi int) {
			for i := lo; i < hi; i++ {
				t := int(r.tokens[i])
				decode(w.Data[t*rb:(t+1)*rb], y[i*cols:(i+1)*cols])
			}
		}
		return func() { r.rowsRun(r.nRows, cols, rows) }, nil
	case dsl.OpMatMul:
		return r.lowerMatMul(id, n)
	case dsl.OpAdd, dsl.OpMul:
		a, _ := in(0)
		b, _ := in(1)
		add := n.Op == dsl.OpAdd
		f := elemNative.Add // kernels/amd64/elem, same bits; nil if none
		if !add {
			f = elemNative.Mul
		}
		rows := func(lo, hi int) {
			y, a, b := y[lo*cols:hi*cols], a[lo*cols:hi*cols], b[lo*cols:hi*cols]
			if f != nil {
				f(a, b, y)
				return
			}
			if add {
				for i := range y {
					y[i] = a[i] + b[i]
				}
				return
			}
			for i := range y {
				y[i] = a[i] * b[i]
			}
		}
		return func() { r.rowsRun(r.nRows, cols, rows) }, nil
	case dsl.OpScale:
		a, _ := in(0)
		f := n.F
		return func() {
			if sc := elemNative.Scale; sc != nil {
				sc(a[:r.nRows*cols], f, nil, y[:r.nRows*cols])
				return
			}
			for i := 0; i < r.nRows*cols; i++ {
				y[i] = a[i] * f
			}
		}, nil
	case dsl.OpSiLU:
		a, _ := in(0)
		rows := func(lo, hi int) {
			// ggml's AVX512 build: ggml_v_silu on blocks of 16 of each row,
			// the C library's expf for the rest (vec.cpp ggml_vec_swiglu_f32).
			for i := lo; i < hi; i++ {
				silu(a[i*cols:(i+1)*cols], y[i*cols:(i+1)*cols])
			}
		}
		return func() { r.rowsRun(r.nRows, 8*cols, rows) }, nil
	case dsl.OpGELU:
		a, _ := in(0)
		return func() {
			const c = 0.7978845608028654 // sqrt(2/π)
			for i := 0; i < r.nRows*cols; i++ {
				x := float64(a[i])
				y[i] = float32(0.5 * x * (1 + math.Tanh(float64(c*(x+float64(0.044715*x*x*x))))))
			}
		}, nil
	case dsl.OpSoftmax:
		a, _ := in(0)
		return func() {
			for i := 0; i < r.nRows; i++ {
				cpugen.Softmax(a[i*cols:(i+1)*cols], y[i*cols:(i+1)*cols])
			}
		}, nil
	case dsl.OpTopK:
		a, w := in(0)
		k := n.K
		return func() {
			for i := 0; i < r.nRows; i++ {
				topK(a[i*w:(i+1)*w], y[i*k:(i+1)*k])
			}
		}, nil
	case dsl.OpRMSNorm, dsl.OpLayerNorm:
		return r.lowerNorm(id, n)
	case dsl.OpRoPE:
		return r.lowerRoPE(id, n)
	case dsl.OpAttention:
		return r.lowerAttention(id, n)
	}
	return nil, fmt.Errorf("op %s has no CPU kernel", n.Op)
}

// vector dequantizes a small weight (a norm scale) to float32 once.
func (r *Runner) vector(wi int) ([]float32, error) {
	if wi < 0 {
		return nil, nil
	}
	w := &r.m.Weights[wi]
	out := make([]float32, w.Dims[0])
	if err := quant.Dequantize(w.Type, w.Data, out); err != nil {
		return nil, fmt.Errorf("weight %s: %w", w.GGUF, err)
	}
	return out, nil
}

func (r *Runner) lowerNorm(id int, n *dsl.Node) (func(), error) {
	a := r.bufs[n.In[0]]
	// A grouped norm (per head) is the same norm over rows of the group's
	// width: the groups of a row are contiguous and share the weight.
	cols := n.Group()
	nRows := func() int { return r.nRows * (n.Cols / cols) }
	y := r.bufs[id]
	w, err := r.vector(n.Weight)
	if err != nil {
		return nil, err
	}
	b, err := r.vector(n.Bias)
	if err != nil {
		return nil, err
	}
	eps := n.F
	rms := n.Op == dsl.OpRMSNorm
	if rms && b == nil {
		// The kernels written in dsl/kernel (kernels/ops), rendered to Go.
		sc := elemNative.Scale // the last loop native where registered, same bits
		rows := func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x, o := a[i*cols:(i+1)*cols], y[i*cols:(i+1)*cols]
				if sc != nil {
					rmsNormNative(sc, x, w, o, eps)
				} else if w != nil {
					cpugen.RMSNorm(x, w, o, eps)
				} else {
					cpugen.RMSNormNoWeight(x, o, eps)
				}
			}
		}
		return func() { r.rowsRun(nRows(), 2*cols, rows) }, nil
	}
	return func() {
		for i := 0; i < nRows(); i++ {
			x, o := a[i*cols:(i+1)*cols], y[i*cols:(i+1)*cols]
			if rms {
				cpugen.RMSNormNoWeight(x, o, eps)
			} else {
				var sum float64
				for _, v := range x {
					sum += float64(v)
				}
				mean := float32(sum / float64(cols))
				var sq float64
				for j, v := range x {
					o[j] = v - mean
					sq += float64(o[j] * o[j])
				}
				scale := 1 / float32(math.Sqrt(float64(float32(sq/float64(cols))+eps)))
				for j := range o {
					o[j] *= scale
				}
			}
			if w != nil {
				for j := range o {
					o[j] *= w[j]
				}
			}
			if b != nil {
				for j := range o {
					o[j] += b[j]
				}
			}
		}
	}, nil
}

// topK writes the indices of the len(out) largest values of x, largest first.
func topK(x, out []float32) {
	k := len(out)
	for j := 0; j < k; j++ {
		best := -1
		for i, v := range x {
			taken := false
			for _, o := range out[:j] {
				if int(o) == i {
					taken = true
					break
				}
			}
			if !taken && (best < 0 || v > x[best]) {
				best = i
			}
		}
		out[j] = float32(best)
	}
}

// dequantizer picks the decode kernel of a weight type: the one rendered
// from dsl/kernel where kernels/ops describes the type, else kernels/quant.
func dequantizer(t quant.Type) func(src []byte, dst []float32) {
	if f, ok := cpugen.Funcs["Dequant"+t.String()].(func([]byte, []float32)); ok {
		return f
	}
	return func(src []byte, dst []float32) { quant.Dequantize(t, src, dst) }
}
