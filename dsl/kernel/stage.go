package kernel

// Stage says that the rest of the statement list it is in (a grid
// iteration's body) reads buf only in elements [off, off+n), that nothing
// a launch before this kernel writes is among them (a weight, not an
// activation) and that the list stores nothing into buf. A target may
// copy that range into fast memory near the cores before anything else
// and read it from there: the CUDA renderer copies it into shared memory
// (cp.async) ahead of its wait for the kernel before it, or of a phase's
// grid barrier, so a decode mat-vec's rows arrive while that kernel
// finishes, where an L2 prefetch only moves them closer. max is the most
// elements a target sets aside for the stage (a constant: the renderer
// sizes its shared memory by it); a range longer than max, or not 16-byte
// aligned on the device, is read where it lies. It never changes a result;
// the interpreter checks that every later load of buf in the list falls
// inside the range and that nothing stores into it.
func (b *Builder) Stage(buf *Buf, off, n any, max int) {
	o, c := lit(Int, off), lit(Int, n)
	switch {
	case !b.check("stage "+buf.Name, o, c):
	case o.Kind != Int || c.Kind != Int:
		b.fail("stage %s: offset of kind %s, count of kind %s", buf.Name, o.Kind, c.Kind)
	case buf.Parent != nil:
		b.fail("stage %s: a window (stage the buffer it is a window of)", buf.Name)
	case max <= 0:
		b.fail("stage %s: room for %d elements", buf.Name, max)
	default:
		b.emit(&Stmt{Op: SStage, Buf: buf, Index: o, Hi: c, Step: max})
	}
}

// stageRange is a stage's elements of a root buffer, [lo, hi) in the
// root's own indices.
type stageRange struct{ lo, hi int }

// stage checks a stage's range and holds loads of its buffer to it until
// the statement list ends (unstage).
func (m *machine) stage(s *Stmt) {
	m.prefetch(s) // the same range check
	off, n := int(m.eval(s.Index).i), int(m.eval(s.Hi).i)
	if m.staged == nil {
		m.staged = map[*Buf]stageRange{}
	}
	root := m.bufs[s.Buf.ID].off
	m.staged[s.Buf] = stageRange{root + off, root + off + n}
}

func (m *machine) unstage(b *Buf) { delete(m.staged, b) }

// checkStaged fails an access to elements [j, j+w) of the root of b
// (absolute) that leaves a stage of that root, or any store into one.
func (m *machine) checkStaged(b *Buf, j, w int, store bool) {
	r := b
	for r.Parent != nil {
		r = r.Parent
	}
	st, ok := m.staged[r]
	switch {
	case !ok:
	case store:
		fail("store into %s while it is staged", b.Name)
	case j < st.lo || j+w > st.hi:
		fail("%s: elements [%d:%d] outside its stage [%d:%d]", b.Name, j, j+w, st.lo, st.hi)
	}
}
