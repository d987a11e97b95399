package ptx

import (
	"fmt"
	"maps"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// Stages (kernel.Stage) on sm_80 and later, where there is a wait to hide:
// a dependent kernel's wait for the one before (Target.Dependent) or a
// phase's grid barrier. Each group of a grid iteration copies its staged
// range into its own slot of the CTA's shared memory with cp.async (16
// bytes a lane a trip) before the wait, so the bytes stream in while the
// kernel before finishes; after the wait it waits for its copies, meets
// its group and reads the buffer through a generic address: the slot's
// (element 0 of the buffer placed so that the range lands in the slot)
// where the range was copied, the buffer's own where it was not (longer
// than the slot, or not 16-byte aligned on the device). A phase's first
// iteration issues its copies before the barrier that starts it (the
// prologue); its loop then only waits for them.

// StageLimit is the most shared memory a CTA's stages take (dynamic shared
// memory, Launch.Stages: within what every sm_80 and later device gives a
// CTA, 99 KiB on the smallest): a CTA whose slots would pass it reads its
// stages where they lie.
const StageLimit = 96 << 10

// stageCTA is the CTA a kernel's stages are sized for where its groups are
// no wider than a warp: the runtime's CTA of grid kernels (the bound is
// declared, so a larger launch fails rather than overruns the slots).
const stageCTA = 128

// ctaFor is the CTA a kernel of groups w wide is launched in (Launch.CTA:
// a group wider than a warp is the whole CTA, else up to stageCTA
// threads), which its stages' slots are sized for: a plain kernel's, a
// phased one's (its widest group's), as planned and as rendered.
func ctaFor(w int) int {
	if w > 32 {
		return w
	}
	return stageCTA
}

// pendingStage is a stage whose copies are issued and whose reads are not
// yet bound: its buffer, the slot's shared address, the element offset's
// bytes and whether the range was copied.
type pendingStage struct {
	buf       *kernel.Buf
	b         *bufReg
	slot, off string
	copied    string
}

// slotBytes is the bytes a stage sets aside a group: its room, rounded to
// whole 16-byte copies.
func slotBytes(s *kernel.Stmt) int {
	return (s.Step*s.Buf.Elem.Bytes() + 15) &^ 15
}

// stageRegion is the bytes of shared memory a group's stages in body take.
func stageRegion(body []*kernel.Stmt) int {
	n := 0
	kernel.Any(body, func(s *kernel.Stmt) bool {
		if s.Op == kernel.SStage {
			n += slotBytes(s)
		}
		return false
	})
	return n
}

// checkStages fails where the stages rendered take other than the shared
// memory Plan gives the launch (Launch.Stages, planned bytes): a CTA
// given less would overrun it.
func (f *fn) checkStages(k *kernel.Kernel, planned int) error {
	if planned != f.stageBytes {
		return fmt.Errorf("ptx: kernel %s: stages rendered in %d bytes of shared memory, planned %d", k.Name, f.stageBytes, planned)
	}
	return nil
}

// stageSlots is the groups of width threads a CTA of cta threads holds.
func stageSlots(width, cta int) int { return max(cta/max(width, 1), 1) }

// StageSlots is the slots a CTA of a grid kernel with groups width wide
// holds (one a group of the CTA it is launched in, ctaFor): what a planner
// multiplies a group's stage by to know a CTA's shared memory.
func StageSlots(width int) int { return stageSlots(width, ctaFor(width)) }

// canStage reports whether kernel body k (lowered, its grid loop grid, its
// groups width wide, in CTAs of cta) renders its stages: on sm_80 and
// later, with no block or tile statements beside them, the slots within
// StageLimit.
func canStage(t Target, body []*kernel.Stmt, grid *kernel.Stmt, width, cta int) bool {
	if t.SM < 80 || grid == nil || kernel.BlockThreads(body) > 0 || kernel.HasTiles(body) {
		return false
	}
	r := stageRegionFor(t, grid)
	return r > 0 && r*stageSlots(width, cta) <= StageLimit
}

// stageRegionFor is the bytes of shared memory a group's stages in grid
// loop grid take for t: twice the stages' where they copy ahead (a slot
// for the iteration computed, one for the next).
func stageRegionFor(t Target, grid *kernel.Stmt) int {
	r := stageRegion(grid.Body)
	if t.StageAhead && aheadable(grid) {
		r *= 2
	}
	return r
}

// gridStages is the shared memory a grid kernel's stages take a CTA
// rendered for t (Launch.Stages): k lowered to body, its grid loop grid;
// where a wait hides their copies or they copy ahead.
func gridStages(t Target, k *kernel.Kernel, body []*kernel.Stmt, grid *kernel.Stmt) int {
	w := width(body)
	cta := ctaFor(w)
	dependent := t.Dependent != nil && t.Dependent(k)
	if !canStage(t, body, grid, w, cta) || (!dependent && !(t.StageAhead && aheadable(grid))) {
		return 0
	}
	return stageRegionFor(t, grid) * stageSlots(w, cta)
}

// phasedStages is a phased kernel's (its phases ps, lowered, in CTAs of
// the widest group w): the most of any phase's.
func phasedStages(t Target, ps []phase, w int) int {
	cta := ctaFor(w)
	n := 0
	for _, p := range ps {
		if canStage(t, p.k.Body, p.grid, p.width, cta) {
			n = max(n, stageRegionFor(t, p.grid)*stageSlots(p.width, cta))
		}
	}
	return n
}

// stageStart sets up the stages of grid loop s's body for this thread's
// group (gridStart has set the lane): the region's base in the CTA's
// shared memory.
func (f *fn) stageStart(s *kernel.Stmt, tid string) {
	f.stageBase, f.stageAt, f.firstIter = "", 0, ""
	r := stageRegion(s.Body)
	if !f.staging || r == 0 {
		return
	}
	if f.stageOnce && !f.ahead { // copying ahead copies every iteration's
		f.firstIter = f.reg(cPred)
		f.ins("setp.eq.u32 %s, 0, 0", f.firstIter)
	}
	slots := stageSlots(f.width, f.stageCTA)
	if f.ahead {
		f.stagePar = f.reg(c64)
		// the first iteration reads the region's first half (stageRegionFor's two)
		f.ins("mov.u64 %s, 0", f.stagePar)
		r *= 2
	}
	f.stageBytes = max(f.stageBytes, r*slots)
	f.stageBase = f.reg(c64)
	f.ins("mov.u64 %s, %s", f.stageBase, f.stageName())
	if slots > 1 {
		g, g64 := f.reg(c32), f.reg(c64)
		f.ins("shr.u32 %s, %s, %d", g, tid, log2(f.width))
		f.ins("cvt.u64.u32 %s, %s", g64, g)
		f.ins("mad.lo.s64 %s, %s, %d, %s", f.stageBase, g64, r, f.stageBase)
	}
}

func (f *fn) stageName() string { return "stages_" + paramName(0, f.entry) }

// stageSync is the barrier of this thread's group: its warp's lanes, or
// the group's (groupSync) where it is wider than a warp; a thread alone
// needs none (its own copies are waited for).
func (f *fn) stageSync() {
	if f.width <= 1 {
		return
	}
	if f.width > 32 {
		f.groupSync()
		return
	}
	f.ins("bar.warp.sync %s", f.mask)
}

// stageIssue renders a stage's copies: in a phase's prologue (f.early)
// they are issued and remembered, in the loop skipped where the prologue
// issued them for this iteration.
func (f *fn) stageIssue(s *kernel.Stmt) {
	if !f.staging || f.stageBase == "" {
		f.out.WriteString("\t// stage: read where it lies (no wait to hide, or no room)\n")
		return
	}
	if f.ahead {
		f.aheadStage(s)
		return
	}
	b := f.buf(s.Buf)
	if b == nil {
		return
	}
	eb := s.Buf.Elem.Bytes()
	room := slotBytes(s)
	slot := f.reg(c64)
	f.ins("add.s64 %s, %s, %d", slot, f.stageBase, f.stageAt)
	f.stageAt += room
	off, n := f.reg(c64), f.reg(c64)
	f.ins("mul.lo.s64 %s, %s, %d", off, f.expr(s.Index), eb)
	f.ins("mul.lo.s64 %s, %s, %d", n, f.expr(s.Hi), eb)
	src := f.reg(c64)
	f.ins("add.s64 %s, %s, %s", src, b.addr, off)
	// copied where it fits the slot and both ends are 16-byte aligned
	ok, p := f.reg(cPred), f.reg(cPred)
	odd := f.reg(c64)
	f.ins("or.b64 %s, %s, %s", odd, src, n)
	f.ins("and.b64 %s, %s, 15", odd, odd)
	f.ins("setp.eq.s64 %s, %s, 0", ok, odd)
	f.ins("setp.le.s64 %s, %s, %d", p, n, room)
	f.ins("and.pred %s, %s, %s", ok, ok, p)
	if f.firstIter != "" {
		f.ins("and.pred %s, %s, %s", ok, ok, f.firstIter)
	}
	skip := f.label()
	pre, issued := f.preStaged[s]
	if issued && !f.early { // not copied, or copied already by the prologue
		f.ins("not.pred %s, %s", p, ok)
		f.ins("or.pred %s, %s, %s", p, p, pre)
		f.ins("@%s bra %s", p, skip)
	} else {
		f.ins("@!%s bra %s", ok, skip)
	}
	f.stageSync() // the group's reads of its slot's last bytes are done
	f.copyRange(slot, src, n)
	f.ins("cp.async.commit_group")
	f.place(skip)
	switch {
	case f.early:
		r := f.reg(cPred)
		f.ins("mov.pred %s, %s", r, ok)
		f.preStaged[s] = r
		return
	case issued:
		f.ins("setp.ne.u32 %s, 0, 0", pre) // later iterations copy their own
	}
	if f.firstIter != "" && f.stageAt == stageRegion(f.grid.Body) {
		f.ins("setp.ne.u32 %s, 0, 0", f.firstIter) // the iteration's last stage: later ones read where the data lies
	}
	f.pending = append(f.pending, pendingStage{buf: s.Buf, b: b, slot: slot, off: off, copied: ok})
}

// copyRange issues the cp.async copies of n bytes from global address src
// to shared address slot: 16 bytes a lane a trip, the group's lanes side
// by side.
func (f *fn) copyRange(slot, src, n string) {
	j, step := f.reg(c64), 16*max(f.width, 1)
	if f.lane != "" {
		f.ins("shl.b64 %s, %s, 4", j, f.lane)
	} else {
		f.ins("mov.u64 %s, 0", j)
	}
	head, done := f.label(), f.label()
	q := f.reg(cPred)
	f.place(head)
	f.ins("setp.ge.s64 %s, %s, %s", q, j, n)
	f.ins("@%s bra %s", q, done)
	d, g := f.reg(c64), f.reg(c64)
	f.ins("add.s64 %s, %s, %s", d, slot, j)
	f.ins("add.s64 %s, %s, %s", g, src, j)
	f.ins("cp.async.cg.shared.global [%s], [%s], 16", d, g)
	f.ins("add.s64 %s, %s, %d", j, j, step)
	f.ins("bra %s", head)
	f.place(done)
}

// stageBind waits for the pending stages' copies, meets the group and
// binds each buffer to its generic address (the slot's where copied),
// returning the bindings it replaced so the list's end restores them.
func (f *fn) stageBind(saved map[*kernel.Buf]*bufReg) map[*kernel.Buf]*bufReg {
	if len(f.pending) == 0 {
		return saved
	}
	if f.ahead {
		f.ins("cp.async.wait_group 1") // this iteration's copies; the next one's stay in flight
	} else {
		f.ins("cp.async.wait_all")
	}
	f.stageSync()
	if saved == nil {
		saved = map[*kernel.Buf]*bufReg{}
	}
	for _, ps := range f.pending {
		gs, staged, own := f.reg(c64), f.reg(c64), f.reg(c64)
		f.ins("cvta.shared.u64 %s, %s", gs, ps.slot)
		f.ins("sub.s64 %s, %s, %s", staged, gs, ps.off)
		f.ins("cvta.global.u64 %s, %s", own, ps.b.addr)
		a := f.reg(c64)
		f.ins("selp.b64 %s, %s, %s, %s", a, staged, own, ps.copied)
		if _, ok := saved[ps.buf]; !ok {
			saved[ps.buf] = f.bufs[ps.buf]
		}
		nb := *ps.b
		nb.addr, nb.generic = a, true
		f.bufs[ps.buf] = &nb
	}
	f.pending = f.pending[:0]
	if f.ahead {
		f.ins("xor.b64 %s, %s, %d", f.stagePar, f.stagePar, stageRegion(f.grid.Body)) // the next iteration reads the other half
	}
	return saved
}

// ld is the load instruction's stem for a buffer: generic where it may be
// staged.
func (b *bufReg) ld() string {
	if b.generic {
		return "ld"
	}
	return "ld.global"
}

// early reports whether s is issued before a kernel's wait: a prefetch, a
// stage, or a loop of nothing but prefetches.
func early(s *kernel.Stmt) bool {
	return s.Op == kernel.SPrefetch || s.Op == kernel.SStage || prefetchLoop(s)
}

// prefetchLoop reports whether s is a loop (of one thread group's trips)
// whose body only prefetches, binds values or runs such loops: the
// prefetches of a strided range, as the rows of a cache's group.
func prefetchLoop(s *kernel.Stmt) bool {
	if s.Op != kernel.SFor || s.Threads > 1 || len(s.Body) == 0 {
		return false
	}
	for _, b := range s.Body {
		if b.Op != kernel.SPrefetch && b.Op != kernel.SLet && !prefetchLoop(b) {
			return false
		}
	}
	return true
}

// Copying ahead (Target.StageAhead): a group's region holds two copies of
// its stages, one for the iteration it computes and one for the next. The
// loop's prologue copies the first iteration's ranges (before the wait or
// the phase's barrier); each iteration then copies the next one's into the
// other half, commits (an empty group past the last iteration, so one
// group a trip is always the newest), waits for all but that newest group
// and reads its own half. A stage's range must then be a function of the
// grid variable alone: every stage sits in the loop body's leading run of
// lets, views, accumulators, prefetches and stages (aheadable), which the
// copies ahead render again with the variable bound to the next iteration.

// aheadable reports whether grid loop s's stages can be copied ahead: all
// of them in its body's leading run, in one run of early statements (whose
// end issues the next iteration's copies once).
func aheadable(s *kernel.Stmt) bool {
	lead := leadingRun(s.Body)
	inLead, first := 0, -1
	for j, st := range s.Body[:lead] {
		if st.Op == kernel.SStage {
			inLead++
		}
		if early(st) && first < 0 {
			first = j
		}
		if first >= 0 && !early(st) {
			return false // a let between two runs of early statements
		}
	}
	all := 0
	kernel.Any(s.Body, func(st *kernel.Stmt) bool {
		if st.Op == kernel.SStage {
			all++
		}
		return false
	})
	return inLead > 0 && inLead == all
}

// leadingRun is the length of body's leading statements up to its last
// early one (a prefetch or stage) among lets, views and accumulators.
func leadingRun(body []*kernel.Stmt) int {
	end := 0
	for j, st := range body {
		if early(st) {
			end = j + 1
		} else if st.Op != kernel.SLet && st.Op != kernel.SView && st.Op != kernel.SAcc {
			break
		}
	}
	return end
}

// aheadCopies renders grid loop s's leading run for iteration i (bound to
// s's variable, every other binding restored after), its stages copied
// into the region's half at byte offset half.
func (f *fn) aheadCopies(s *kernel.Stmt, i, half string) {
	vars, bufs := maps.Clone(f.vars), maps.Clone(f.bufs) // its lets and views are the next iteration's
	f.vars[s.Var] = i
	at := f.stageAt
	f.stageAt = 0
	for _, st := range s.Body[:leadingRun(s.Body)] {
		switch st.Op {
		case kernel.SStage:
			f.aheadCopy(st, half)
		case kernel.SPrefetch:
			// the loop body renders its own
		default:
			f.stmt(st)
		}
	}
	f.stageAt = at
	f.vars, f.bufs = vars, bufs
}

// aheadPrologue copies the first iteration i of grid loop s (if any; hi is
// the loop's bound) into the first half and commits them.
func (f *fn) aheadPrologue(s *kernel.Stmt, i, hi string) {
	if f.stageBase == "" {
		return
	}
	skip := f.label()
	p := f.reg(cPred)
	f.ins("setp.ge.s64 %s, %s, %s", p, i, hi)
	f.ins("@%s bra %s", p, skip)
	f.aheadCopies(s, i, f.stagePar)
	f.place(skip)
	f.ins("cp.async.commit_group")
}

// aheadNext copies the next iteration's ranges into the other half (where
// there is a next iteration) and commits: after the group has done reading
// that half in the iteration before.
func (f *fn) aheadNext() {
	s := f.grid
	next, other := f.reg(c64), f.reg(c64)
	f.ins("add.s64 %s, %s, %s", next, f.aheadI, f.aheadN)
	f.ins("xor.b64 %s, %s, %d", other, f.stagePar, stageRegion(s.Body))
	skip := f.label()
	p := f.reg(cPred)
	f.ins("setp.ge.s64 %s, %s, %s", p, next, f.aheadHi)
	f.ins("@%s bra %s", p, skip)
	f.stageSync()
	f.aheadCopies(s, next, other)
	f.place(skip)
	f.ins("cp.async.commit_group")
}

// aheadRange is stage s's range for the iteration bound now: its slot in
// the half at byte offset half, its element offset's bytes, its length's,
// its global address and whether it is copied (it fits the slot, both
// ends 16-byte aligned).
func (f *fn) aheadRange(s *kernel.Stmt, b *bufReg, half string) (slot, off, n, src, ok string) {
	eb := s.Buf.Elem.Bytes()
	slot = f.reg(c64)
	f.ins("add.s64 %s, %s, %s", slot, f.stageBase, half)
	f.ins("add.s64 %s, %s, %d", slot, slot, f.stageAt)
	f.stageAt += slotBytes(s)
	off, n = f.reg(c64), f.reg(c64)
	f.ins("mul.lo.s64 %s, %s, %d", off, f.expr(s.Index), eb)
	f.ins("mul.lo.s64 %s, %s, %d", n, f.expr(s.Hi), eb)
	src = f.reg(c64)
	f.ins("add.s64 %s, %s, %s", src, b.addr, off)
	ok = f.reg(cPred)
	p, odd := f.reg(cPred), f.reg(c64)
	f.ins("or.b64 %s, %s, %s", odd, src, n)
	f.ins("and.b64 %s, %s, 15", odd, odd)
	f.ins("setp.eq.s64 %s, %s, 0", ok, odd)
	f.ins("setp.le.s64 %s, %s, %d", p, n, slotBytes(s))
	f.ins("and.pred %s, %s, %s", ok, ok, p)
	return slot, off, n, src, ok
}

// aheadCopy issues stage s's copies into the half at byte offset half
// (nothing where its range is not copied).
func (f *fn) aheadCopy(s *kernel.Stmt, half string) {
	b := f.buf(s.Buf)
	if b == nil {
		return
	}
	slot, _, n, src, ok := f.aheadRange(s, b, half)
	skip := f.label()
	f.ins("@!%s bra %s", ok, skip)
	f.copyRange(slot, src, n)
	f.place(skip)
}

// aheadStage renders stage s in the loop body: the current iteration's
// range in its half, to be read once the copies an iteration before (or
// the prologue) issued have landed (stageBind).
func (f *fn) aheadStage(s *kernel.Stmt) {
	b := f.buf(s.Buf)
	if b == nil {
		return
	}
	slot, off, _, _, ok := f.aheadRange(s, b, f.stagePar)
	f.pending = append(f.pending, pendingStage{buf: s.Buf, b: b, slot: slot, off: off, copied: ok})
}
