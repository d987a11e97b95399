package gpuexec

import (
	"cmp"
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

// layoutShape is an integer mat-vec's store form, weight layout and
// shape (ops.DotMatVec's arguments).
type layoutShape struct {
	form, layout string
	shape        ops.DotShape
}

// matVec is ops.DotMatVec(form, layout, sh), its arguments recorded in
// p.matVecs.
func (p *plan) matVec(form, layout string, sh ops.DotShape) *kernel.Kernel {
	k := ops.DotMatVec(form, layout, sh)
	if p.matVecs == nil {
		p.matVecs = map[*kernel.Kernel]layoutShape{}
	}
	p.matVecs[k] = layoutShape{form, layout, sh}
	return k
}

func ropeStacks() bool { return os.Getenv("JITLLM_ROPE_STACK") != "0" }

// ropeStackRows is JITLLM_ROPE_STACK_ROWS: the split launch's rows a group
// where set to an even number (0, the default: the q and k rows' shape's).
// The rows change no bit, only how many CTAs the launch takes: at 2 rows a
// warp the 8B's split launch (88 registers a thread, 5 CTAs of 128 a
// multiprocessor) is 768 CTAs, 1.16 waves of the H200's 660, and its last
// CTAs started 7.7 µs after its first (TestGPUStepTrace, stop 37). At 4
// (384 CTAs of 142 registers, one wave) the H100's 8B step was 0.975 of
// the default (stop 38).
func ropeStackRows() int {
	r := envInt("JITLLM_ROPE_STACK_ROWS", 0)
	if r < 2 || r%2 != 0 {
		return 0
	}
	return r
}

// ropeSplitUnroll is JITLLM_ROPE_SPLIT_UNROLL: the split launch's unroll of
// the v rows where set (0, the default: the v rows' own shape's). The 8B's
// split launch at the Q6_KA rows' unroll 2 takes 88 registers (5 CTAs a
// multiprocessor, 1.16 waves of the H200); at 1, 70 (7 CTAs: one wave).
func ropeSplitUnroll() int { return max(envInt("JITLLM_ROPE_SPLIT_UNROLL", 0), 0) }

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
			a, okA := p.matVecs[l.k]
			b, okB := p.matVecs[ls[i+1].k]
			next := ls[i+1]
			sh := a.shape
			if r := ropeStackRows(); r > 0 {
				sh.Rows = r
			}
			if !okA || !okB || a.form != "RopeKV" || b.form != "RopeKV" || a.shape.Norm != b.shape.Norm || a.layout == b.layout ||
				!ops.CanSplitRopeKV(a.layout, b.layout) || !splitPair(l.args, next.args, sh.Rows, b.shape.Rows, a.shape.Norm) {
				out = append(out, l)
				continue
			}
			sh.Stage, sh.Prefetch = 0, false
			unrollB := cmp.Or(ropeSplitUnroll(), b.shape.Unroll)
			key := fmt.Sprintf("%s_%s%s_u%d", a.layout, b.layout, sh, unrollB)
			k, ok := made[key]
			if !ok {
				k = ops.DotMatVecRopeKVSplit(a.layout, b.layout, sh, unrollB)
				made[key] = k
			}
			// (wa, wb, xq, xd, [ss, eps,] y, kc, vc, step, freqs, nq, nk, headDim, dims, thetaScale, freqScale)
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
// b no q or k rows, both the same activation (with norm, its parts and ε),
// caches, step, frequencies and RoPE, and both parts' rows whole groups.
func splitPair(a, b []any, rowsA, rowsB int, norm bool) bool {
	o := 0 // (ss, eps) after xd
	if norm {
		o = 2
	}
	if len(a) != 14+o || len(b) != 14+o {
		return false
	}
	ya, okY := a[3+o].(view)
	yb, okYB := b[3+o].(view)
	nq, okQ := a[8+o].(int)
	nk, okK := a[9+o].(int)
	if !okY || !okYB || !okQ || !okK || nq+nk != ya.n || b[8+o] != any(0) || b[9+o] != any(0) {
		return false
	}
	for j := 1; j < len(a); j++ {
		if j != 3+o && j != 8+o && j != 9+o && a[j] != b[j] {
			return false
		}
	}
	return rowsA%2 == 0 && ya.n%rowsA == 0 && yb.n%rowsA == 0 && rowsB > 0
}
