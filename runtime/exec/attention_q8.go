package exec

import (
	"math"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/cpugen"
	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// lowerAttentionQ8 is lowerAttention over a q8_0 cache: the generated
// KVStoreSeqQ8_0 quantizes the step's k and v rows into the layer's cache,
// then each task first quantizes its query heads to Q8_0
// (quant.QuantizeQ8_0Split), as ggml's CPU flash attention converts Q to
// K's vec-dot type, and attends with AttentionSeqQ8_0's arithmetic: V is
// dequantized and accumulated in f32 (kernels/ops). Where kernels/cpukern
// has native q8_0 loops for the heads (nativeAttentionQ8), a task is a
// (row, KV head) pair whose query heads share each key and value row,
// attendGroupQ8Native; else a (row, head) pair of the generated
// AttentionSeqQ8_0. Where it has a native Q8_0 quantizer (q8Quantizer),
// that quantizes the cache rows and the native path's queries. All give
// the same bits (kvq8_test.go).
func (r *Runner) lowerAttentionQ8(id int, n *dsl.Node) (func(), error) {
	p := n.Attn
	q, k, v := r.bufs[n.In[0]], r.bufs[n.In[1]], r.bufs[n.In[2]]
	y := r.bufs[id]
	hd, layer, ctx := p.HeadDim, n.Layer, r.opt.Context
	kvDim, group := p.KVHeads*hd, p.Heads/p.KVHeads
	if need := r.opt.MaxBatch * p.Heads * hd; len(r.attnQQ) < need { // shared by the layers: one runs at a time
		r.attnQQ, r.attnQD = make([]byte, need), make([]float32, need/32)
	}
	nk, native := nativeAttentionQ8(hd)
	native = native && group*hd <= maxGroupVals
	gv := group * hd
	qz := q8Quantizer()
	task := func(lo, hi int) {
		kv := &r.kv[layer]
		if native { // lo, hi: (row, KV head) pairs
			sc := attnScratchPool.Get().(*attnScratch)
			defer attnScratchPool.Put(sc)
			for t := lo; t < hi; t++ {
				row := t / p.KVHeads
				off := int(r.rowSeq[row])*ctx*kvDim + t%p.KVHeads*hd
				qq, qd := r.attnQQ[t*gv:(t+1)*gv], r.attnQD[t*gv/32:(t+1)*gv/32]
				if qz != nil {
					quantizeQ8Split(qz, sc, q[t*gv:(t+1)*gv], qq, qd)
				} else {
					quant.QuantizeQ8_0Split(q[t*gv:(t+1)*gv], qq, qd)
				}
				attendGroupQ8Native(&nk, sc, qq, qd, kv.kq, kv.ks, kv.vq, kv.vs, y[t*gv:(t+1)*gv], group, int(r.rowPos[row]), off, kvDim, p.Scale)
			}
			return
		}
		qq, qd := r.attnQQ[lo*hd:hi*hd], r.attnQD[lo*hd/32:hi*hd/32]
		quant.QuantizeQ8_0Split(q[lo*hd:hi*hd], qq, qd)
		cpugen.AttentionSeqQ8_0(qq, qd, kv.kq, kv.ks, kv.vq, kv.vs, y[lo*hd:hi*hd], r.rowPos, r.rowSeq,
			hd, p.Heads, group, kvDim, ctx, lo, p.Scale)
	}
	perRow := p.Heads
	if native {
		perRow = p.KVHeads
	}
	store := func(lo, hi int) {
		kv := &r.kv[layer]
		if qz != nil { // the same bytes: each row's blocks as QuantizeQ8_0 makes them
			sc := attnScratchPool.Get().(*attnScratch)
			defer attnScratchPool.Put(sc)
			c := kv.caches()
			for i := lo; i < hi; i++ {
				at := (int(r.rowSeq[i])*ctx + int(r.rowPos[i])) * kvDim
				storeQ8(qz, sc, k[i*kvDim:(i+1)*kvDim], c[0], at)
				storeQ8(qz, sc, v[i*kvDim:(i+1)*kvDim], c[1], at)
			}
			return
		}
		cpugen.KVStoreSeqQ8_0(k[lo*kvDim:hi*kvDim], v[lo*kvDim:hi*kvDim], kv.kq, kv.vq, kv.ks, kv.vs,
			r.rowPos[lo:hi], r.rowSeq[lo:hi], kvDim, ctx)
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

// q8Quantizer is the registered native Q8_0 row quantizer (kernels/cpukern:
// quant.QuantizeRowX86's blocks, which are QuantizeQ8_0's, the query's and
// KVStoreSeqQ8_0's), or nil (also where attnQ8Native is off).
func q8Quantizer() func(x []float32, dst []byte) {
	if q, ok := cpukern.LookupQuantizer(quant.Q8_0); ok && q.Quantize != nil && attnQ8Native {
		return q.Quantize
	}
	return nil
}

// quantizeQ8Split is quant.QuantizeQ8_0Split(x, qs, ds) through the native
// quantizer qz: its block_q8_0s (in sc.q8, so len(x) ≤ maxGroupVals) split
// into quants and float32 scales.
func quantizeQ8Split(qz func(x []float32, dst []byte), sc *attnScratch, x []float32, qs []byte, ds []float32) {
	nb := len(x) / 32
	blk := sc.q8[:nb*34]
	qz(x, blk)
	for i := range nb {
		b := blk[34*i : 34*i+34]
		ds[i] = quant.F16ToF32(uint16(b[0]) | uint16(b[1])<<8)
		copy(qs[32*i:32*i+32], b[2:])
	}
}

// storeQ8 quantizes the row x into q8_0 cache c from value at, as
// KVStoreSeqQ8_0 does, through the native quantizer qz: a group's scratch
// of block_q8_0s at a time, split into the cache's quants and scales by
// kvCache.get (they are SaveSeq's layout).
func storeQ8(qz func(x []float32, dst []byte), sc *attnScratch, x []float32, c kvCache, at int) {
	for lo := 0; lo < len(x); lo += maxGroupVals {
		n := min(maxGroupVals, len(x)-lo)
		blk := sc.q8[:n/32*34]
		qz(x[lo:lo+n], blk)
		c.get(blk, at+lo, n)
	}
}

// attnQ8Native switches the q8_0 cache's native loops and quantizer off
// where false (the tests compare both paths).
var attnQ8Native = true

// nativeAttentionQ8 returns the registered native q8_0 attention loops
// when they fit heads of hd values (whole Q8_0 blocks, at least two).
func nativeAttentionQ8(hd int) (cpukern.AttentionQ8, bool) {
	nk, ok := cpukern.LookupAttentionQ8()
	return nk, ok && attnQ8Native && hd%32 == 0 && hd >= 64 && hd <= maxHeadDim && nk.Dot != nil && nk.Accum != nil
}

// AttentionQ8ISA names what runs the q8_0 cache's attention loops for
// heads of hd values on this CPU: the native build's instruction set, or
// "go" (the generated AttentionSeqQ8_0).
func AttentionQ8ISA(hd int) string {
	if nk, ok := nativeAttentionQ8(hd); ok {
		return nk.ISA
	}
	return "go"
}

// attendGroupQ8Native is AttentionSeqQ8_0 for the g query heads of one
// row that share a KV head, their Q8_0 quants qq (g·hd) and scales qd
// (g·hd/32), over cache positions 0..pos, whose quants start at off of
// kq/vq (scales at off/32 of ks/vs) and are kvDim apart, into y. Per block
// of positions and head, nk.Dot computes the scores' dots, the Go code
// below runs the online softmax in AttentionSeqQ8_0's arithmetic (the
// f16 path's attendGroupNative, with an f32 accumulator), and nk.Accum
// applies the block's rescales and value steps in order. Each head's
// state evolves position by position as in AttentionSeqQ8_0, so the
// results are its bits.
func attendGroupQ8Native(nk *cpukern.AttentionQ8, sc *attnScratch, qq []byte, qd []float32, kq []byte, ks []uint16, vq []byte, vs []uint16, y []float32, g, pos, off, kvDim int, scale float32) {
	hd := len(qq) / g
	nb := hd / 32
	acc := sc.accs[:g*hd]
	clear(acc)
	ms, ss := sc.ms[:g], sc.ss[:g]
	for h := range g {
		ms[h], ss[h] = float32(math.Inf(-1)), 0
	}
	for j0 := 0; j0 <= pos; j0 += attnBlock {
		n := min(attnBlock, pos+1-j0)
		kb := j0*kvDim + off
		dots, ws, mscs := sc.dots[:n], sc.vs[:n], sc.mscs[:n]
		args, exps := sc.args[:n], sc.exps[:n]
		for h := range g {
			nk.Dot(qq[h*hd:(h+1)*hd], qd[h*nb:(h+1)*nb], kq[kb:], ks[kb/32:], kvDim, dots)
			for jj, dot := range dots {
				dots[jj] = float32(dot * scale)
			}
			ms[h], ss[h] = softmaxBlock(dots, args, exps, ws, mscs, j0 == 0, ms[h], ss[h])
			nk.Accum(acc[h*hd:(h+1)*hd], vq[kb:], vs[kb/32:], kvDim, ws, mscs)
		}
	}
	for h := range g {
		inv := float32(1 / ss[h])
		for d := h * hd; d < (h+1)*hd; d++ {
			y[d] = float32(acc[d] * inv)
		}
	}
}
