package exec

import (
	"math"
	"sync"

	"github.com/jitllm/jitllm/kernels/cpukern"
)

// attnBlock is how many cache positions attendGroupNative takes per kernel
// call: their keys and values (64·hd f16 each) stay in L1 for the group's
// heads.
const attnBlock = 64

// attnScratch is attendGroupNative's working memory. It lives on the heap
// (a sync.Pool) because the native loops are func values, through which
// escape analysis cannot see: stack arrays passed to them would be moved to
// the heap on every call.
type attnScratch struct {
	qs, accs       [maxGroupVals]float32
	ms, ss         [maxGroupVals / 8]float32
	dots, vs, mscs [attnBlock]float32
	args, exps     [attnBlock]float64           // a block's softmax exp arguments and values
	q8             [maxGroupVals / 32 * 34]byte // the q8_0 cache's block_q8_0s (quantizeQ8Split)
}

// softmaxExp is exps[i] = math.Exp(args[i]): the registered native one
// (kernels/amd64/elem, bit for bit) where there is one.
var softmaxExp = func() func(args, exps []float64) {
	if e, ok := cpukern.LookupElementwise(); ok && e.Exp != nil {
		return e.Exp
	}
	return func(args, exps []float64) {
		for i, a := range args {
			exps[i] = math.Exp(a)
		}
	}
}()

var attnScratchPool = sync.Pool{New: func() any { return new(attnScratch) }}

// nativeAttention returns the registered native attention loops when they
// fit heads of hd values (Accum takes multiples of 8).
func nativeAttention(hd int) (cpukern.Attention, bool) {
	nk, ok := cpukern.LookupAttention()
	return nk, ok && hd%8 == 0 && nk.Dot != nil && nk.Accum != nil
}

// AttentionISA names what runs the attention's inner loops for heads of
// hd values on this CPU: the native build's instruction set, or "go".
func AttentionISA(hd int) string {
	if nk, ok := nativeAttention(hd); ok {
		return nk.ISA
	}
	return "go"
}

// attendGroupNative is attendGroup with its two inner loops native: per
// block of positions and head, nk.Dot computes the dots' 64-lane parts, the
// Go code below adds the tail and runs the online softmax in attendGroup's
// arithmetic, and nk.Accum applies the block's rescales and value steps in
// order. Each head's state evolves position by position as in attendGroup,
// so the results are the same bits (attention_test.go checks it).
func attendGroupNative(nk *cpukern.Attention, sc *attnScratch, tab *[1 << 16]float32, q []float32, kc, vc []uint16, y []float32, g, pos, off, kvDim int, scale float32) {
	hd := len(q) / g
	qh, acc := sc.qs[:g*hd], sc.accs[:g*hd]
	ms, ss := sc.ms[:g], sc.ss[:g]
	for d, x := range q {
		qh[d] = tab[f32tof16(x)]
		acc[d] = 0
	}
	for h := range g {
		ms[h], ss[h] = float32(math.Inf(-1)), 0
	}
	main := hd / 64 * 64
	for j0 := 0; j0 <= pos; j0 += attnBlock {
		n := min(attnBlock, pos+1-j0)
		kb := j0*kvDim + off
		dots, vss, mscs := sc.dots[:n], sc.vs[:n], sc.mscs[:n]
		for h := range g {
			qq := qh[h*hd : (h+1)*hd]
			nk.Dot(qq[:main], kc[kb:], kvDim, dots)
			args, exps := sc.args[:n], sc.exps[:n]
			for jj, l0 := range dots {
				dot := float64(0)
				dot = float64(dot + float64(l0))
				if main < hd {
					kr := kc[kb+jj*kvDim : kb+jj*kvDim+hd]
					for i := main; i < hd; i++ {
						dot = float64(dot + float64(float32(qq[i]*tab[kr[i]])))
					}
				}
				dots[jj] = float32(float32(dot) * scale)
			}
			ms[h], ss[h] = softmaxBlock(dots, args, exps, vss, mscs, j0 == 0, ms[h], ss[h])
			nk.Accum(acc[h*hd:(h+1)*hd], vc[kb:], kvDim, vss, mscs)
		}
	}
	for h := range g {
		inv := float32(1 / ss[h])
		for d := h * hd; d < (h+1)*hd; d++ {
			y[d] = float32(acc[d] * inv)
		}
	}
}

// softmaxBlock runs the online softmax over one head's block of scores
// (dots, scaled) from its running maximum m and sum: the running maximum
// first, so each position needs at most one exp (mscale's where the score
// is a new maximum, the weight's where not), whose argument depends only on
// the maximum before it, and the block's exps run in one vector call in
// between. It leaves each position's value weight in ws and the
// accumulator's rescale factor in mscs (1 where the maximum holds: a rescale
// by exactly 1 changes nothing, as the kernels' "gt" skips it) and returns
// the new maximum and sum; first is whether the block starts at position 0
// (its first rescale is of nothing). attendGroup's and AttentionSeqQ8_0's
// arithmetic, position by position.
func softmaxBlock(dots []float32, args, exps []float64, ws, mscs []float32, first bool, m, sum float32) (float32, float32) {
	m0 := m
	for jj, s := range dots {
		if s > m {
			args[jj] = float64(float32(m - s))
			m = s
		} else {
			args[jj] = float64(float32(s - m))
		}
	}
	softmaxExp(args, exps)
	m = m0
	for jj, s := range dots {
		gt := s > m
		mscale, w := float32(1), float32(1)
		switch {
		case first && jj == 0:
			mscale = 0
		case gt:
			mscale = float32(exps[jj])
		}
		if !gt {
			w = float32(exps[jj])
		}
		mscs[jj] = 1
		if gt {
			m = s
			mscs[jj] = mscale
		}
		ws[jj] = w
		sum = float32(float32(sum*mscale) + w)
	}
	return m, sum
}
