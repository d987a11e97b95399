package exec

import (
	"math"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
)

// f16 is the table of every half-precision value, for the KV cache reads.
var f16 = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = quant.F16ToF32(uint16(i))
	}
	return &t
}()

// roundF16 rounds a float32 to the nearest half-precision value.
func roundF16(x float32) float32 { return f16[quant.F32ToF16(x)] }

// lowerRoPE rotates each head's leading Dims values by position, computing
// the angles as ggml does (θ multiplied by base^(-2/dims) pair by pair in float32).
func (r *Runner) lowerRoPE(id int, n *dsl.Node) (func(), error) {
	p := n.Rope
	a, y := r.bufs[n.In[0]], r.bufs[id]
	cols := n.Cols
	freqs, err := r.vector(p.FreqsW)
	if err != nil {
		return nil, err
	}
	thetaScale := float32(math.Pow(float64(p.Base), -2.0/float64(p.Dims)))
	half := p.Dims / 2
	return func() {
		cs := r.ropeCS
		for i := 0; i < r.nRows; i++ {
			theta := float32(r.rowPos[i])
			c := cs[i*p.Dims : (i+1)*p.Dims]
			for j := 0; j < half; j++ {
				t := theta
				if freqs != nil {
					t /= freqs[j]
				}
				t *= p.FreqScale
				c[2*j] = float32(math.Cos(float64(t)))
				c[2*j+1] = float32(math.Sin(float64(t)))
				theta *= thetaScale
			}
		}
		for i := 0; i < r.nRows; i++ {
			c := cs[i*p.Dims : (i+1)*p.Dims]
			for h := 0; h < p.Heads; h++ {
				x := a[i*cols+h*p.HeadDim : i*cols+(h+1)*p.HeadDim]
				o := y[i*cols+h*p.HeadDim : i*cols+(h+1)*p.HeadDim]
				for j := 0; j < half; j++ {
					i0, i1 := 2*j, 2*j+1
					if p.Mode == dsl.RopeNeox {
						i0, i1 = j, j+half
					}
					cos, sin := c[2*j], c[2*j+1]
					x0, x1 := x[i0], x[i1]
					o[i0] = x0*cos - x1*sin
					o[i1] = x0*sin + x1*cos
				}
				copy(o[p.Dims:], x[p.Dims:])
			}
		}
	}, nil
}

// lowerAttention appends the step's k and v rows to the layer's f16 cache,
// then runs causal attention one (row, head) pair per task. The arithmetic
// follows ggml's CPU flash attention with an f16 cache: queries rounded to
// f16, an online softmax, and the value accumulator kept in f16.
func (r *Runner) lowerAttention(id int, n *dsl.Node) (func(), error) {
	p := n.Attn
	q, k, v := r.bufs[n.In[0]], r.bufs[n.In[1]], r.bufs[n.In[2]]
	y := r.bufs[id]
	qCols := p.Heads * p.HeadDim
	kvDim := p.KVHeads * p.HeadDim
	group := p.Heads / p.KVHeads
	hd := p.HeadDim
	layer := n.Layer
	task := func(lo, hi int) {
		kv := &r.kv[layer]
		for t := lo; t < hi; t++ {
			row, h := t/p.Heads, t%p.Heads
			pos := int(r.rowPos[row])
			qh := r.qh[row*qCols+h*hd : row*qCols+(h+1)*hd]
			acc := y[row*qCols+h*hd : row*qCols+(h+1)*hd]
			// This row's sequence: its slot of the cache, then the head.
			off := int(r.rowSeq[row])*r.opt.Context*kvDim + (h/group)*hd
			M := float32(math.Inf(-1))
			var S float32
			for j := 0; j <= pos; j++ {
				kr := kv.k[j*kvDim+off : j*kvDim+off+hd]
				// ggml_vec_dot_f16 as the AVX512 build runs it (vec.cpp).
				s := quant.DotF16AVX512Values(qh, kr) * p.Scale
				ms, vs := float32(1), float32(1)
				if s > M {
					ms = expf(M - s)
					M = s
					for d := range acc {
						acc[d] = roundF16(acc[d] * ms)
					}
				} else {
					vs = expf(s - M)
				}
				vr := kv.v[j*kvDim+off : j*kvDim+off+hd]
				for d := range acc {
					acc[d] = roundF16(float32(math.FMA(float64(f16[vr[d]]), float64(vs), float64(acc[d]))))
				}
				S = S*ms + vs
			}
			inv := 1 / S
			for d := range acc {
				acc[d] *= inv
			}
		}
	}
	return func() {
		kv := &r.kv[layer]
		for i := 0; i < r.nRows; i++ {
			at := (int(r.rowSeq[i])*r.opt.Context + int(r.rowPos[i])) * kvDim
			for d := 0; d < kvDim; d++ {
				kv.k[at+d] = quant.F32ToF16(k[i*kvDim+d])
				kv.v[at+d] = quant.F32ToF16(v[i*kvDim+d])
			}
		}
		for i := 0; i < r.nRows*qCols; i++ {
			r.qh[i] = roundF16(q[i])
		}
		for i := 0; i < r.nRows*qCols; i++ {
			y[i] = 0
		}
		r.pool.Run(r.nRows*p.Heads, 4, task)
	}, nil
}
