package ptx

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// A block epilogue (kernel.BlockEpilogue) is one entry: the producer's
// grid loop as its own kernel's (any grid, its dependent wait, prefetches
// and stages: the first iteration's copies before the wait), and after
// each iteration the group counts its rows into its block's count: every
// lane's stores released
// (fence.acq_rel.gpu), lane 0 adds the rows with an acquire-release atomic
// and hands the old count to the group; the group whose rows complete the
// block (old+rows a multiple of the block: the counts only grow) acquires
// the count in every lane and runs the epilogue's lead-in and grid loop
// body for that block, reading what the other groups stored. Groups are a
// thread or a warp, the producer's and the epilogue's alike.

// epilogueEntry renders block epilogue kernel k, entry id of its module.
func epilogueEntry(k *kernel.Kernel, t Target, id int) (string, error) {
	ps, _, err := lowerPhases(k, t)
	if err != nil {
		return "", err
	}
	prod, epi := ps[0], ps[1]
	if prod.width != epi.width || (prod.width != 1 && prod.width != 32) {
		return "", fmt.Errorf("ptx: kernel %s: a producer of groups of %d and an epilogue of %d (both a thread or a warp)", k.Name, prod.width, epi.width)
	}
	at := -1
	for j, s := range epi.k.Body {
		if s == epi.grid {
			at = j
		}
	}
	if at < 0 {
		return "", fmt.Errorf("ptx: kernel %s: the epilogue's grid loop is not in its body", k.Name)
	}
	dependent := t.Dependent != nil && t.Dependent(k)
	if dependent && t.SM < 90 {
		return "", fmt.Errorf("ptx: kernel %s: dependent launch needs sm_90 (target sm_%d)", k.Name, t.SM)
	}
	f := newFn(k.Name, prod.k, t)
	f.grid, f.width, f.stageCTA = prod.grid, prod.width, ctaFor(prod.width)
	stages := epilogueStages(t, k, prod)
	if f.staging = stages > 0; f.staging {
		// the slots are the CTA's groups: a larger CTA would overrun them
		f.bounds = fmt.Sprintf(".maxntid %d, 1, 1\n", f.stageCTA)
	}
	if t.Trace {
		f.traceStart(1)
	}
	params := f.loadParams(prod.k.Params, 0)
	params = append(params, f.loadParams(epi.k.Params, len(prod.k.Params))...)
	cntParam := k.Params[len(k.Params)-1]
	params = append(params, f.loadParams([]kernel.Param{cntParam}, len(prod.k.Params)+len(epi.k.Params))...)
	cnt := f.buf(cntParam.Buf)
	e := k.Epilogue
	f.afterGroup = func(i string) {
		f.out.WriteString(fmt.Sprintf("\t// the group's %d rows counted into its block of %d; the group that completes it runs %s for it\n", e.Rows, e.Block, epi.k.Name))
		blk, addr := f.reg(c64), f.reg(c64)
		f.ins("mul.lo.s64 %s, %s, %d", blk, i, e.Rows)
		f.ins("div.s64 %s, %s, %d", blk, blk, e.Block)
		f.ins("mad.lo.s64 %s, %s, 4, %s", addr, blk, cnt.addr)
		old, sum := f.reg(c32), f.reg(c32)
		p := f.reg(cPred)
		skip := f.label()
		f.ins("fence.acq_rel.gpu")
		if prod.width == 32 {
			f.ins("setp.eq.s64 %s, %s, 0", p, f.lane)
			f.ins("@%s atom.acq_rel.gpu.global.add.u32 %s, [%s], %d", p, old, addr, e.Rows)
			f.ins("shfl.sync.idx.b32 %s, %s, 0, 31, %s", old, old, f.mask)
		} else {
			f.ins("atom.acq_rel.gpu.global.add.u32 %s, [%s], %d", old, addr, e.Rows)
		}
		f.ins("add.u32 %s, %s, %d", sum, old, e.Rows)
		f.ins("rem.u32 %s, %s, %d", sum, sum, e.Block)
		f.ins("setp.ne.u32 %s, %s, 0", p, sum)
		f.ins("@%s bra %s", p, skip)
		f.ins("ld.acquire.gpu.global.u32 %s, [%s]", sum, addr) // every lane's acquire of the completed count
		// the epilogue's lead-in and its grid loop's body at the block
		k0 := f.k
		f.k = epi.k
		f.stmts(epi.k.Body[:at])
		v := f.reg(c64)
		lo := f.expr(epi.grid.Lo)
		f.ins("mad.lo.s64 %s, %s, %d, %s", v, blk, epi.grid.Step, lo)
		f.vars[epi.grid.Var] = v
		f.stmts(epi.grid.Body)
		f.k = k0
		f.place(skip)
	}
	if err := f.firstPhase(prod, dependent); err != nil {
		return "", err
	}
	f.afterGroup, f.staging = nil, false
	f.traceEnd(id, 0)
	f.ins("ret")
	if f.err != nil {
		return "", f.err
	}
	if err := f.checkStages(k, stages); err != nil {
		return "", err
	}
	mode := fmt.Sprintf("%s, each group then counting its %d rows into its block of %d, the group completing a block running %s for it; groups of %d, any grid",
		prod.k.Name, e.Rows, e.Block, epi.k.Name, prod.width)
	return f.text(k.Doc, mode, params, 0, 8*prod.width/32), nil
}

// epilogueStages is the shared memory the stages of block epilogue k's
// producer p take a CTA (Launch.Stages), its CTA a grid kernel's.
func epilogueStages(t Target, k *kernel.Kernel, p phase) int {
	return firstPhaseStages(t, k, p, ctaFor(p.width))
}
