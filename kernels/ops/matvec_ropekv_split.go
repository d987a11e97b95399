package ops

import (
	"cmp"
	"fmt"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// DotMatVecRopeKVSplit is the RopeKV form of DotMatVec over a q, k, v stack
// whose q and k rows are of weight type typA and whose v rows of typB (a
// Q4_K_M file's Q6_K v projections beside Q4_K q and k): one launch where
// the stack's two types took two, MatVecDotRopeKV<typA>_<typB><sh>. Its
// operands: (wa, wb, xq, xd, y, kc, vc, step, freqs, nq, nk, headDim,
// dims, thetaScale, freqScale), wa the nq+nk rows of q and k, wb the v
// rows, y q's and k's outputs (q's stored, rotated); v's rows go to the
// cache only. Groups take sh.Rows rows (even) of sh.Threads threads, the
// first (nq+nk)/Rows groups wa's and the rest wb's, each row's sum
// RopeKV's of its type in that shape; units take sh.Unroll a trip over
// wa, unrollB over wb. No stage, prefetch or second activation row. With
// sh.Norm (ss, eps) follow xd and the sums are scaled as DotShape.Norm
// scales them.
func DotMatVecRopeKVSplit(typA, typB string, sh DotShape, unrollB int) *k.Kernel {
	ca, okA := dotCutOf(typA)
	cb, okB := dotCutOf(typB)
	switch {
	case !okA || !okB:
		panic("DotMatVecRopeKVSplit: no integer mat-vec for " + typA + " or " + typB)
	case sh.Rows < 2 || sh.Rows%2 != 0:
		panic("DotMatVecRopeKVSplit: RopeKV takes rows in pairs")
	case sh.Stage > 0 || sh.Prefetch || sh.Acts > 1:
		panic("DotMatVecRopeKVSplit: no stage, prefetch or activation rows")
	case !CanSplitRopeKV(typA, typB):
		panic("DotMatVecRopeKVSplit: " + typA + " and " + typB + " take different activation blocks")
	}
	sh.Threads = cmp.Or(sh.Threads, WarpLanes)
	rows := sh.Rows
	name := fmt.Sprintf("MatVecDotRopeKV%s_%s%s", typA, typB, sh)
	if max(unrollB, 1) != max(sh.Unroll, 1) {
		name += fmt.Sprintf("_vu%d", max(unrollB, 1)) // the v rows' own unroll
	}
	b := k.New(name)
	b.Doc(fmt.Sprintf("multiplies a q, k (%s) and v (%s) stack by the quantized activation (xq, xd) in integers, %d rows a group of %d threads, rotating q and k and caching k and v as it stores them.", typA, typB, rows, sh.Threads))
	wa, wb := b.Buffer("wa", k.U8), b.Buffer("wb", k.U8)
	xq, xd := b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	var ss *k.Buf
	var eps k.Expr
	if sh.Norm {
		ss, eps = b.Buffer("ss", k.F32), b.Scalar("eps", k.F32)
	}
	y := b.Buffer("y", k.F32)
	rk := ropeKVParams(b)
	// each part's weight blocks a row (a Q6_KA block spans eight of the
	// activation's)
	nbA, nbB := b.Let("nbA", xd.Len().Div(max(ca.scales, 1))), b.Let("nbB", xd.Len().Div(max(cb.scales, 1)))
	bytesA, bytesB := b.Let("bytesA", nbA.Mul(ca.bytes)), b.Let("bytesB", nbB.Mul(cb.bytes))
	nab := b.Let("nab", rk.nq.Add(rk.nk))
	nv := b.Let("nv", wb.Len().Div(bytesB))
	rk.rows = b.Let("rows", nab.Add(nv))
	groupsA := b.Let("groupsA", nab.Div(rows))
	once := func(cond k.Expr) k.Expr { return k.Select(cond, k.I(1), k.I(0)) }
	b.ParallelFor("r", 0, groupsA.Add(nv.Div(rows)), func(g k.Expr) {
		get := func(v *k.Var) k.Expr { return v.Get() }
		if sh.Norm {
			scale := normScale(b, ss, eps, nbA.Mul(ca.qk))
			get = func(v *k.Var) k.Expr { return v.Get().Mul(scale) }
		}
		part := func(loop string, c dotCut, w *k.Buf, nb, rowBytes, group, first k.Expr) {
			sums := groupSums(b, loop, c, []*k.Buf{w}, xq, xd, nb, rowBytes, group.Mul(rows), rows, 1)
			for q := 0; q < rows; q += 2 {
				rk.pair(b, y, first.Add(group.Mul(rows)).Add(q), get(sums[0][q][0]), get(sums[0][q+1][0]))
			}
		}
		b.For("pa", 0, once(g.Lt(groupsA)), func(k.Expr) { part("ua", ca, wa, nbA, bytesA, g, k.I(0)) })
		b.For("pb", 0, once(g.Ge(groupsA)), func(k.Expr) { part("ub", cb, wb, nbB, bytesB, g.Sub(groupsA), nab) })
	})
	b.Schedule("ua", k.LoopSchedule{Threads: sh.Threads, Unroll: sh.Unroll})
	b.Schedule("ub", k.LoopSchedule{Threads: sh.Threads, Unroll: unrollB})
	if sh.Norm {
		b.Schedule("nss_i", k.LoopSchedule{Threads: sh.Threads})
	}
	return b.MustBuild()
}

// CanSplitRopeKV reports whether DotMatVecRopeKVSplit takes q and k rows
// of layout typA beside v rows of typB: both integer mat-vecs of the same
// activation (values a scale), whatever their weight blocks.
func CanSplitRopeKV(typA, typB string) bool {
	ca, okA := dotCutOf(typA)
	cb, okB := dotCutOf(typB)
	return okA && okB && ca.qk/max(ca.scales, 1) == cb.qk/max(cb.scales, 1)
}

// dotCutOf is the integer cut of a weight type or device layout name.
func dotCutOf(typ string) (dotCut, bool) {
	if c, ok := dotCuts()[typ]; ok {
		return c, true
	}
	c, ok := layoutCuts()[typ]
	return c, ok
}
