package kernel

// Prefetch says that n elements of buf from off will be read soon and that
// nothing a launch before this kernel writes is among them (a weight, not
// an activation). A target may start moving them toward the cores before
// anything else: the CUDA renderer issues L2 prefetches ahead of its wait
// for the kernel before it (programmatic dependent launch), so a decode
// mat-vec streams its rows while that kernel finishes. It never changes a
// result; the interpreter only checks the range.
func (b *Builder) Prefetch(buf *Buf, off, n any) {
	o, c := lit(Int, off), lit(Int, n)
	switch {
	case !b.check("prefetch "+buf.Name, o, c):
	case o.Kind != Int || c.Kind != Int:
		b.fail("prefetch %s: offset of kind %s, count of kind %s", buf.Name, o.Kind, c.Kind)
	default:
		b.emit(&Stmt{Op: SPrefetch, Buf: buf, Index: o, Hi: c})
	}
}

// prefetch checks a prefetch's range.
func (m *machine) prefetch(s *Stmt) {
	off, n := int(m.eval(s.Index).i), int(m.eval(s.Hi).i)
	if n < 0 {
		fail("prefetch of %d elements of %s", n, s.Buf.Name)
	}
	if n > 0 {
		m.at(s.Buf, off, n)
	}
}
