package ptx

import (
	"fmt"
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// A phased kernel (kernel.Phases) is one entry that runs each phase's grid
// loop in turn over the same CTAs, a grid-wide barrier between them: a
// chain of short kernels that streams without launch boundaries. Its CTAs
// must all be resident at once (Launch.Resident: the launch sizes the grid
// by occupancy), or a barrier would wait for a CTA that cannot start.
//
// A phase that prefetches (kernel.Prefetch, as a mat-vec's weight rows)
// issues its first iteration's prefetches before the barrier, so a CTA
// done early streams the next phase's weights while the last ones finish
// (what a launch boundary cannot overlap); its loop then renders them as
// nothing.

// phase is one phase lowered for the target.
type phase struct {
	k     *kernel.Kernel
	grid  *kernel.Stmt
	width int
}

// lowerPhases lowers each phase of k and returns them with the CTA width
// they share: the widest group (a narrower group wider than a warp takes a
// named barrier, at most 15 to a CTA). Phases hold no block or tile
// statements, so a phased kernel uses no dynamic shared memory.
func lowerPhases(k *kernel.Kernel, t Target) ([]phase, int, error) {
	var ps []phase
	w := 1
	for _, p := range k.Phases {
		lk, g, err := lower(p, t)
		if err != nil {
			return nil, 0, err
		}
		if g == nil {
			return nil, 0, fmt.Errorf("ptx: kernel %s: phase %s has no grid loop (one-thread kernels are not phases)", k.Name, p.Name)
		}
		if kernel.BlockThreads(lk.Body) > 0 || kernel.HasTiles(lk.Body) {
			return nil, 0, fmt.Errorf("ptx: kernel %s: phase %s holds block or tile statements (not yet phases)", k.Name, p.Name)
		}
		pw := width(lk.Body)
		ps = append(ps, phase{lk, g, pw})
		w = max(w, pw)
	}
	for _, p := range ps {
		// groups wider than a warp that share the CTA each take a named
		// barrier (1 to 15)
		if p.width > 32 && w/p.width > 15 {
			return nil, 0, fmt.Errorf("ptx: kernel %s: phase %s's groups of %d, %d to a CTA of %d (at most 15)", k.Name, p.k.Name, p.width, w/p.width, w)
		}
	}
	return ps, w, nil
}

// phasedEntry renders phased kernel k.
func phasedEntry(k *kernel.Kernel, t Target, id int) (string, error) {
	ps, w, err := lowerPhases(k, t)
	if err != nil {
		return "", err
	}
	switch t.PhaseBarrier {
	case "", "sleep", "count", "bare":
	default:
		return "", fmt.Errorf("ptx: kernel %s: no phase barrier %q", k.Name, t.PhaseBarrier)
	}
	f := newFn(k.Name, ps[0].k, t)
	f.cta, f.barrier = w, t.PhaseBarrier
	dependent := t.Dependent != nil && t.Dependent(k)
	if dependent && t.SM < 90 {
		return "", fmt.Errorf("ptx: kernel %s: dependent launch needs sm_90 (target sm_%d)", k.Name, t.SM)
	}
	if w > 32 {
		f.red = "red_" + paramName(0, k.Name)
	}
	// the barrier's words first; each phase's parameters are loaded where
	// it starts, so a kernel may be a phase twice (its Vars and Bufs bound
	// anew each time)
	last := k.Params[len(k.Params)-1]
	barDecl := f.loadParams([]kernel.Param{last}, len(k.Params)-1)
	bar := f.bufs[last.Buf]
	if t.Trace {
		f.traceStart(len(ps))
	}
	var params []string
	first := 0
	var names []string
	// the CTA the runtime launches, so ptxas budgets registers for it and
	// the stages' slots fit
	cta := ctaFor(w)
	f.stageCTA = cta
	for i, p := range ps {
		f.k, f.grid, f.width, f.lane, f.mask = p.k, p.grid, p.width, "", ""
		f.staging = canStage(t, p.k.Body, p.grid, p.width, cta)
		f.ahead = f.staging && t.StageAhead && aheadable(p.grid)
		names = append(names, fmt.Sprintf("%s (%d)", p.k.Name, p.width))
		if i > 0 {
			f.out.WriteString(fmt.Sprintf("\t// phase %d: %s\n", i, p.k.Name))
		}
		params = append(params, f.loadParams(p.k.Params, first)...)
		first += len(p.k.Params)
		if i == 0 {
			if err := f.firstPhase(p, dependent); err != nil {
				return "", err
			}
			continue
		}
		// where the phase prefetches, the statements before its grid loop
		// load nothing (prefetchFirst): they, and the first iteration's
		// prefetches, go before the barrier
		early := hasPrefetch(p.k.Body) && prefetchFirst(p.k.Body) == nil
		at := 0
		for early && p.k.Body[at] != p.grid {
			at++
		}
		f.prefetch = false
		f.stmts(p.k.Body[:at])
		if early {
			if f.staging {
				// the CTA's groups are done with the phase before's slots
				f.ins("bar.sync 0")
			}
			f.prefetch, f.early = true, true
			if f.ahead {
				// the first iteration's copies before the barrier; the loop
				// then copies one ahead
				i, hi, _ := f.gridStart(p.grid)
				f.aheadPrologue(p.grid, i, hi)
				f.aheadReady = f.stageBase != ""
			} else {
				f.prologue(p.grid)
			}
			f.prefetch, f.early = false, false
		}
		f.traceEnd(id, i-1)
		f.gridBarrier(bar, i)
		f.traceNext()
		f.stmts(p.k.Body[at:])
	}
	f.traceEnd(id, len(ps)-1)
	f.ins("ret")
	if f.err != nil {
		return "", f.err
	}
	f.bounds = fmt.Sprintf(".maxntid %d, 1, 1\n", cta)
	if t.PhaseCTAs > 0 {
		f.bounds += fmt.Sprintf(".minnctapersm %d\n", t.PhaseCTAs)
	}
	mode := fmt.Sprintf("%d phases, each a loop spread over the grid (group-stride), a grid barrier between: %s; "+
		"CTAs of %d (a multiple of 32 where no group is wider), every CTA resident at once", len(ps), strings.Join(names, ", "), w)
	if err := f.checkStages(k, phasedStages(t, ps, w)); err != nil {
		return "", err
	}
	return f.text(k.Doc, mode, append(params, barDecl...), 0, 8*w/32), nil
}

// firstPhase renders a phased kernel's first phase p, which waits for the
// kernel before as a kernel does (with dependent launch): after its
// prefetches or stages' copies where it has them, else at its start.
func (f *fn) firstPhase(p phase, dependent bool) error {
	f.dependent, f.prefetch = dependent, dependent
	if dependent {
		if err := prefetchFirst(p.k.Body); err != nil {
			return fmt.Errorf("ptx: kernel %s: %w", p.k.Name, err)
		}
		if !hasPrefetch(p.k.Body) {
			f.depWait()
		}
	}
	f.stmts(p.k.Body)
	if dependent && hasPrefetch(p.k.Body) {
		// a group with no iteration met no wait; the later phases may
		// read what the kernel before wrote (a repeated wait returns at
		// once)
		f.depWait()
	}
	f.dependent = false
	return nil
}

// prologue renders the leading prefetches of grid loop s's first iteration
// for this thread's group (the loop body's statements up to its last
// prefetch, which load nothing).
func (f *fn) prologue(s *kernel.Stmt) {
	end := 0
	for j, st := range s.Body {
		if early(st) {
			end = j + 1
		} else if st.Op != kernel.SLet && st.Op != kernel.SView && st.Op != kernel.SAcc {
			break
		}
	}
	i, hi, _ := f.gridStart(s)
	skip := f.label()
	p := f.reg(cPred)
	f.ins("setp.ge.s64 %s, %s, %s", p, i, hi)
	f.ins("@%s bra %s", p, skip)
	f.vars[s.Var] = i
	f.stmts(s.Body[:end])
	f.place(skip)
}

// gridBarrier waits until every CTA of the grid has arrived at barrier i
// (1 up), with their stores visible to all: the CTA's threads meet, its
// thread 0 counts the CTA in and waits for the others, the threads meet
// again.
func (f *fn) gridBarrier(bar *bufReg, i int) {
	f.ins("bar.sync 0")
	tid := f.reg(c32)
	p := f.reg(cPred)
	done := f.label()
	f.ins("mov.u32 %s, %%tid.x", tid)
	f.ins("setp.ne.u32 %s, %s, 0", p, tid)
	f.ins("@%s bra %s", p, done)
	bare := f.barrier == "bare"
	if !bare {
		f.ins("fence.acq_rel.gpu")
	}
	if f.barrier == "count" || bare {
		f.countBarrier(bar, i)
	} else {
		f.generationBarrier(bar)
	}
	if !bare {
		f.ins("fence.acq_rel.gpu")
	}
	f.place(done)
	f.ins("bar.sync 0")
}

// generationBarrier counts the CTA in (bar[0]) and spins until the
// generation (bar[1]) moves on; the last to arrive resets the count and
// moves the generation, so the words are ready for the next barrier and
// the next launch.
func (f *fn) generationBarrier(bar *bufReg) {
	gen, old, n, cur := f.reg(c32), f.reg(c32), f.reg(c32), f.reg(c32)
	p := f.reg(cPred)
	spin, out := f.label(), f.label()
	// the generation is read before this CTA counts itself in, so it is
	// the one the last arrival will move on from
	f.ins("ld.acquire.gpu.global.u32 %s, [%s+4]", gen, bar.addr)
	f.ins("atom.acq_rel.gpu.global.add.u32 %s, [%s], 1", old, bar.addr)
	f.ins("mov.u32 %s, %%nctaid.x", n)
	f.ins("sub.u32 %s, %s, 1", n, n)
	f.ins("setp.ne.u32 %s, %s, %s", p, old, n)
	f.ins("@%s bra %s", p, spin)
	f.ins("st.relaxed.gpu.global.u32 [%s], 0", bar.addr)
	f.ins("add.u32 %s, %s, 1", cur, gen)
	f.ins("st.release.gpu.global.u32 [%s+4], %s", bar.addr, cur)
	f.ins("bra %s", out)
	f.place(spin)
	if f.barrier == "sleep" {
		f.ins("nanosleep.u32 64")
	}
	f.ins("ld.acquire.gpu.global.u32 %s, [%s+4]", cur, bar.addr)
	f.ins("setp.eq.u32 %s, %s, %s", p, cur, gen)
	f.ins("@%s bra %s", p, spin)
	f.place(out)
}

// countBarrier adds the CTA to a 64-bit count of arrivals that only grows
// and spins until it reaches this barrier's target: at the launch's first
// barrier a returning atomic gives the count the launch started from (a
// multiple of the grid, as every launch of these words adds the same
// number), after it a reduction, no round trip to wait for.
func (f *fn) countBarrier(bar *bufReg, i int) {
	n, cur, target := f.reg(c64), f.reg(c64), f.reg(c64)
	nc := f.reg(c32)
	p := f.reg(cPred)
	f.ins("mov.u32 %s, %%nctaid.x", nc)
	f.ins("cvt.u64.u32 %s, %s", n, nc)
	if i == 1 {
		old, r := f.reg(c64), f.reg(c64)
		f.base = f.reg(c64)
		f.ins("atom.acq_rel.gpu.global.add.u64 %s, [%s], 1", old, bar.addr)
		f.ins("rem.u64 %s, %s, %s", r, old, n)
		f.ins("sub.u64 %s, %s, %s", f.base, old, r)
	} else {
		f.ins("red.release.gpu.global.add.u64 [%s], 1", bar.addr)
	}
	f.ins("mad.lo.u64 %s, %s, %d, %s", target, n, i, f.base)
	spin := f.label()
	d := f.reg(c64)
	f.place(spin)
	f.ins("ld.acquire.gpu.global.u64 %s, [%s]", cur, bar.addr)
	f.ins("sub.s64 %s, %s, %s", d, cur, target)
	f.ins("setp.lt.s64 %s, %s, 0", p, d)
	f.ins("@%s bra %s", p, spin)
}
