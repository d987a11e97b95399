package exec

import (
	"math"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/quant"
)

// lowerRoPE rotates each head's leading Dims values by its row's position
// with the arithmetic of the generated RopeNormalSeq/RopeNeoxSeq
// (kernels/ops: ggml's angles, θ multiplied by base^(-2/dims) pair by pair
// in float32). The angles depend on the row's position only, so each row's
// cos/sin are computed once for all its heads (the generated kernel does
// it per head), into a scratch table the rope nodes share.
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
	half := p.Dims / 2
	if need := r.opt.MaxBatch * half * 2; len(r.ropeCS) < need {
		r.ropeCS = make([]float32, need)
	}
	neox := p.Mode == dsl.RopeNeox
	hd := p.HeadDim
	rows := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			cs := r.ropeCS[i*half*2 : (i+1)*half*2]
			theta := float32(int(r.rowPos[i]))
			for q := 0; q < half; q++ {
				th := theta
				ang := float32(float32(th/freqs[q]) * p.FreqScale)
				cs[2*q] = float32(math.Cos(float64(ang)))
				cs[2*q+1] = float32(math.Sin(float64(ang)))
				theta = float32(th * thetaScale)
			}
			for h := 0; h < p.Heads; h++ {
				o := i*cols + h*hd
				x, out := a[o:o+hd], y[o:o+hd]
				for q := 0; q < half; q++ {
					c, s := cs[2*q], cs[2*q+1]
					a0, a1 := 2*q, 2*q+1
					if neox {
						a0, a1 = q, q+half
					}
					x0, x1 := x[a0], x[a1]
					out[a0] = float32(float32(x0*c) - float32(x1*s))
					out[a1] = float32(float32(x0*s) + float32(x1*c))
				}
				copy(out[p.Dims:], x[p.Dims:])
			}
		}
	}
	return func() { r.rowsRun(r.nRows, p.Heads*p.Dims, rows) }, nil
}

// rowsRun runs fn over the step's rows, split over the workers when the
// rows hold enough work (work: values per row) to be worth waking them.
func (r *Runner) rowsRun(rows, work int, fn func(lo, hi int)) {
	if rows < 2 || rows*work < 1<<15 {
		fn(0, rows)
		return
	}
	r.pool.Run(rows, max(1, (1<<13)/max(work, 1)), fn)
}

// maxHeadDim and maxGroupVals bound the head size and a KV group's query
// values in the inlined attention (its scratch is on the stack); larger
// ones run the generated kernel.
const (
	maxHeadDim   = 256
	maxGroupVals = 1024
)

// lowerAttention appends the step's k and v rows to the layer's f16 cache
// (KVStoreSeq), then runs causal attention one (row, head) pair per task,
// with the arithmetic of the generated AttentionSeq (kernels/ops), which
// follows ggml's CPU flash attention with an f16 cache: queries rounded to
// f16, the K·Q dot in ggml_vec_dot_f16's AVX512 order, an online softmax,
// and the value accumulator kept in f16. attendGroup computes the same values
// with the query rounded once per head instead of once per position, each
// key and value row decoded once for the heads that share it, and the f16
// conversions inlined (attention_test.go holds the two equal bit for bit). Row r's cache slot is sequence rowSeq[r]'s.
// A q8_0 cache (Options.KVType) is lowerAttentionQ8's.
func (r *Runner) lowerAttention(id int, n *dsl.Node) (func(), error) {
	if r.opt.KVType == KVQ8_0 {
		return r.lowerAttentionQ8(id, n)
	}
	p := n.Attn
	q, k, v := r.bufs[n.In[0]], r.bufs[n.In[1]], r.bufs[n.In[2]]
	y := r.bufs[id]
	kvDim := p.KVHeads * p.HeadDim
	group := p.Heads / p.KVHeads
	hd := p.HeadDim
	layer := n.Layer
	tab := f16tab()
	inline := hd <= maxHeadDim && group*hd <= maxGroupVals
	nk, native := nativeAttention(hd) // attendGroup's loops in assembly, same bits
	// Tasks are (row, KV head) pairs when inlined, (row, head) pairs else.
	task := func(lo, hi int) {
		kv := &r.kv[layer]
		if !inline {
			cpugen.AttentionSeq(q[lo*hd:hi*hd], kv.k, kv.v, y[lo*hd:hi*hd], r.rowPos, r.rowSeq,
				hd, p.Heads, group, kvDim, r.opt.Context, lo, p.Scale)
			return
		}
		gv := group * hd
		var sc *attnScratch
		if native {
			sc = attnScratchPool.Get().(*attnScratch)
			defer attnScratchPool.Put(sc)
		}
		for t := lo; t < hi; t++ {
			row := t / p.KVHeads
			off := int(r.rowSeq[row])*r.opt.Context*kvDim + t%p.KVHeads*hd
			if native {
				attendGroupNative(&nk, sc, tab, q[t*gv:(t+1)*gv], kv.k, kv.v, y[t*gv:(t+1)*gv], group, int(r.rowPos[row]), off, kvDim, p.Scale)
				continue
			}
			attendGroup(tab, q[t*gv:(t+1)*gv], kv.k, kv.v, y[t*gv:(t+1)*gv], group, int(r.rowPos[row]), off, kvDim, p.Scale)
		}
	}
	perRow := p.KVHeads
	if !inline {
		perRow = p.Heads
	}
	f16 := elemNative.F16 // kernels/amd64/elem: quant.F32ToF16's bits, as KVStoreSeq
	store := func(lo, hi int) {
		kv := &r.kv[layer]
		if f16 != nil {
			for i := lo; i < hi; i++ {
				at := (int(r.rowSeq[i])*r.opt.Context + int(r.rowPos[i])) * kvDim
				f16(k[i*kvDim:(i+1)*kvDim], kv.k[at:at+kvDim])
				f16(v[i*kvDim:(i+1)*kvDim], kv.v[at:at+kvDim])
			}
			return
		}
		cpugen.KVStoreSeq(k[lo*kvDim:hi*kvDim], v[lo*kvDim:hi*kvDim], kv.k, kv.v, r.rowPos[lo:hi], r.rowSeq[lo:hi], kvDim, r.opt.Context)
	}
	return func() {
		r.rowsRun(r.nRows, kvDim, store)
		if n := r.nRows * perRow; n < 2 {
			task(0, n)
		} else {
			r.pool.Run(n, 1, task)
		}
	}, nil
}

// attendGroup is AttentionSeq for the g query heads q (g·hd values, one
// row's heads that share a KV head) over cache positions 0..pos, whose keys
// and values start at off and are kvDim apart, into y. Each head's
// arithmetic is AttentionSeq's; the heads share each position's key and
// value row, decoded from f16 once for all of them.
func attendGroup(tab *[1 << 16]float32, q []float32, kc, vc []uint16, y []float32, g, pos, off, kvDim int, scale float32) {
	hd := len(q) / g
	var qs, accs [maxGroupVals]float32
	var kfs, vfs [maxHeadDim]float32
	var ms, ss [maxGroupVals / 8]float32 // each head's running max and sum
	qh, acc := qs[:g*hd], accs[:g*hd]
	kf, vf := kfs[:hd], vfs[:hd]
	for d, x := range q {
		qh[d] = tab[f32tof16(x)]
	}
	for h := range g {
		ms[h] = float32(math.Inf(-1))
	}
	main := hd / 64 * 64
	for j := 0; j <= pos; j++ {
		kb := j*kvDim + off
		for d, h := range kc[kb : kb+hd] {
			kf[d] = tab[h]
		}
		for d, h := range vc[kb : kb+hd] {
			vf[d] = tab[h]
		}
		for h := range g {
			qq, a := qh[h*hd:(h+1)*hd], acc[h*hd:(h+1)*hd]
			// ggml_vec_dot_f16's AVX512 order: 64 lanes, halved pairwise.
			var l [64]float32
			for i := 0; i < main; i += 64 {
				q64, k64 := (*[64]float32)(qq[i:]), (*[64]float32)(kf[i:])
				for u := range l {
					l[u] = float32(math.FMA(float64(q64[u]), float64(k64[u]), float64(l[u])))
				}
			}
			for w := 32; w >= 1; w /= 2 {
				for u := 0; u < w; u++ {
					l[u] = float32(l[u] + l[u+w])
				}
			}
			dot := float64(0)
			dot = float64(dot + float64(l[0]))
			for i := main; i < hd; i++ {
				dot = float64(dot + float64(float32(qq[i]*kf[i])))
			}
			s := float32(float32(dot) * scale)
			m := ms[h]
			gt := s > m
			mscale, vs := float32(1), float32(1)
			switch {
			case j == 0:
				mscale = 0
			case gt:
				mscale = float32(math.Exp(float64(float32(m - s))))
			}
			if !gt {
				vs = float32(math.Exp(float64(float32(s - m))))
			}
			if gt {
				ms[h] = s
				for d := range a {
					a[d] = tab[f32tof16(float32(a[d]*mscale))]
				}
			}
			// a = f16(v·vs + a), f32tof16 inlined by hand (the compiler
			// does not): the normal range rounds in place, the rest go to quant.
			v := vf[:len(a)]
			for d := range a {
				f := float32(math.FMA(float64(v[d]), float64(vs), float64(a[d])))
				b := math.Float32bits(f)
				if (b>>23)&0xff-113 < 30 {
					a[d] = tab[uint16(b>>16)&0x8000|uint16((b&0x7fffffff+0xfff+(b>>13)&1)>>13-112<<10)]
				} else {
					a[d] = tab[quant.F32ToF16(f)]
				}
			}
			ss[h] = float32(float32(ss[h]*mscale) + vs)
		}
	}
	for h := range g {
		inv := float32(1 / ss[h])
		for d := h * hd; d < (h+1)*hd; d++ {
			y[d] = float32(acc[d] * inv)
		}
	}
}
