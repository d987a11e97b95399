package gpuexec

import (
	"fmt"
	"os"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
)

// A Q4_K_M file's q, k and v projections are not all of one type (half the
// blocks' v are Q6_K), so their RopeKV stack takes two launches there: q
// and k, then v alone. ops.DotMatVecRopeKVSplit is both in one launch,
// the v rows' groups beside the q and k rows' (one launch boundary fewer a
// block, 16 a token on the 8B): on the H100 (stop 35) the 8B's step 1.6%
// faster, the 1B's 2.5%. JITLLM_ROPE_STACK=0 turns it off. The split
// kernel takes no stages (JITLLM_STAGE): its launch streams as unstaged.

// layoutShape is an integer mat-vec's weight layout and shape (a RopeKV
// or a SwiGLU launch's).
type layoutShape struct {
	layout string
	shape  ops.DotShape
}

func ropeStacks() bool { return os.Getenv("JITLLM_ROPE_STACK") != "0" }

// ropeStackRows is JITLLM_ROPE_STACK_ROWS: the split launch's rows a group
// where set to an even number (0, the default: the q and k rows' shape's).
// The rows change no bit, only how many CTAs the launch takes: at 2 rows a
// warp the 8B's split launch (88 registers a thread, 5 CTAs of 128 a
// multiprocessor) is 768 CTAs, 1.16 waves of the H200's 660, and its last
// CTAs started 7.7 µs after its first (TestGPUStepTrace, stop 37).
func ropeStackRows() int {
	r := envInt("JITLLM_ROPE_STACK_ROWS", 0)
	if r < 2 || r%2 != 0 {
		return 0
	}
	return r
}

// stackRopeKV replaces, in the one-row steps, each RopeKV launch of q and
// k rows alone followed by one of v rows alone (of another layout, the same
// activation, caches and RoPE) with one split launch in the first's shape
// (the v rows' unroll their own), where its rows pair up with both parts.
func (p *plan) stackRopeKV() {
	made := map[string]*kernel.Kernel{}
	merge := func(ls []launch) []launch {
		var out []launch
		for i := 0; i < len(ls); i++ {
			l := ls[i]
			if i+1 == len(ls) {
				out = append(out, l)
				continue
			}
			a, okA := p.ropeShapes[l.k]
			b, okB := p.ropeShapes[ls[i+1].k]
			next := ls[i+1]
			sh := a.shape
			if r := ropeStackRows(); r > 0 {
				sh.Rows = r
			}
			if !okA || !okB || a.layout == b.layout || !ops.CanSplitRopeKV(a.layout, b.layout) || !splitPair(l.args, next.args, sh.Rows, b.shape.Rows) {
				out = append(out, l)
				continue
			}
			sh.Stage, sh.Prefetch = 0, false
			key := fmt.Sprintf("%s_%s%s_u%d", a.layout, b.layout, sh, b.shape.Unroll)
			k, ok := made[key]
			if !ok {
				k = ops.DotMatVecRopeKVSplit(a.layout, b.layout, sh, b.shape.Unroll)
				made[key] = k
			}
			// (wa, wb, xq, xd, y, kc, vc, step, freqs, nq, nk, headDim, dims, thetaScale, freqScale)
			args := append([]any{l.args[0], next.args[0]}, l.args[1:]...)
			out = append(out, launch{k: k, args: args, node: l.node})
			i++
		}
		return out
	}
	for _, ls := range p.oneRowSteps() {
		*ls = merge(*ls)
	}
}

// splitPair reports whether RopeKV launches a (q and k rows) and b (v
// rows) can be one split launch of a's rows a group: a holds no v rows,
// b no q or k rows, both the same activation, caches, step, frequencies
// and RoPE, and both parts' rows whole groups.
func splitPair(a, b []any, rowsA, rowsB int) bool {
	if len(a) != 14 || len(b) != 14 {
		return false
	}
	ya, okY := a[3].(view)
	yb, okYB := b[3].(view)
	nq, okQ := a[8].(int)
	nk, okK := a[9].(int)
	if !okY || !okYB || !okQ || !okK || nq+nk != ya.n || b[8] != any(0) || b[9] != any(0) {
		return false
	}
	for _, j := range []int{1, 2, 4, 5, 6, 7, 10, 11, 12, 13} {
		if a[j] != b[j] {
			return false
		}
	}
	return rowsA%2 == 0 && ya.n%rowsA == 0 && yb.n%rowsA == 0 && rowsB > 0
}
