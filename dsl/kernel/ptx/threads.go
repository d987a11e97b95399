package ptx

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// Cooperative loops (kernel.Stmt.Threads, the tree in dsl/kernel's
// threads.go): a group of width threads (a part of a warp, a warp, or a
// whole CTA) shares each grid iteration; a cooperative loop strides by the
// width from the thread's lane, its split accumulators combine with
// shfl.sync.bfly within each warp and, past 32, through shared memory.

// width is the one Threads of a lowered body's cooperative loops (1: none).
func width(body []*kernel.Stmt) int {
	w := 1
	var walk func([]*kernel.Stmt)
	walk = func(ss []*kernel.Stmt) {
		for _, s := range ss {
			if s.Op == kernel.SFor && s.Threads > w {
				w = s.Threads
			}
			walk(s.Body)
		}
	}
	walk(body)
	w = max(w, kernel.BlockThreads(body)) // a CTA runs a block product
	if kernel.HasTiles(body) {
		w = max(w, 32) // a warp runs a tile's mma
	}
	return w
}

// laneMask sets the shfl member mask: the group's lanes of the warp.
func (f *fn) laneMask(tid string) {
	f.mask = f.reg(c32)
	if f.width >= 32 {
		f.ins("mov.b32 %s, -1", f.mask)
		return
	}
	base := f.reg(c32)
	f.ins("and.b32 %s, %s, %d", base, tid, 32-f.width) // the group's first lane in the warp
	f.ins("mov.b32 %s, %d", f.mask, uint32(1)<<f.width-1)
	f.ins("shl.b32 %s, %s, %s", f.mask, f.mask, base)
}

func (f *fn) zero(c class, r string) {
	switch c {
	case cF32:
		f.ins("mov.f32 %s, 0f00000000", r)
	case cF64:
		f.ins("mov.f64 %s, 0d0000000000000000", r)
	default:
		f.ins("mov.%s %s, 0", btypeOf(c), r)
	}
}

// threadLoop renders a cooperative loop: this thread's iterations, then
// the tree over the split accumulators, then a barrier if it stored.
func (f *fn) threadLoop(s *kernel.Stmt) {
	if f.lane == "" {
		f.fail("loop %s: Threads outside a grid group or a cooperative one-CTA kernel", s.Var.Name)
		return
	}
	accs := kernel.ThreadAccs(s)
	before := make([]string, len(accs))
	for a, v := range accs {
		r, ok := f.vars[v]
		if !ok {
			f.fail("fold into undeclared %s", v.Name)
			return
		}
		if v.Fold == kernel.OpAdd {
			c := classOf(v.Kind)
			before[a] = f.reg(c)
			f.mov(v.Kind, before[a], r)
			f.zero(c, r)
		}
	}
	i := f.reg(c64)
	f.ins("mad.lo.s64 %s, %s, %d, %s", i, f.lane, s.Step, f.expr(s.Lo))
	hi, stride := f.frozen(s.Hi), s.Threads*s.Step
	if s.Unroll > 1 {
		f.unrolledFrom(s, i, hi, stride, s.Unroll)
	}
	f.loopFrom(s, i, hi, fmt.Sprint(stride))
	for a, v := range accs {
		r := f.vars[v]
		f.tree(v, r)
		if v.Fold == kernel.OpAdd {
			f.mov(v.Kind, r, f.binop(kernel.OpAdd, v.Kind, before[a], r))
		}
	}
	if kernel.Stores(s.Body) {
		f.sync()
	}
}

// unrolledFrom runs a thread's iterations of cooperative loop s u at a
// trip (i, i+stride, …: one basic block where the body has no branches, so
// ptxas issues all their loads before the first use) while all u are in
// range; the loop rendered after it finishes the rest, in order.
func (f *fn) unrolledFrom(s *kernel.Stmt, i, hi string, stride, u int) {
	head, end := f.label(), f.label()
	last, p := f.reg(c64), f.reg(cPred)
	f.place(head)
	f.ins("add.s64 %s, %s, %d", last, i, (u-1)*stride)
	f.ins("setp.ge.s64 %s, %s, %s", p, last, hi)
	f.ins("@%s bra %s", p, end)
	for c := 0; c < u; c++ {
		ic := i
		if c > 0 {
			ic = f.reg(c64)
			f.ins("add.s64 %s, %s, %d", ic, i, c*stride)
		}
		f.vars[s.Var] = ic
		f.stmts(s.Body)
	}
	f.ins("add.s64 %s, %s, %d", i, i, u*stride)
	f.ins("bra %s", head)
	f.place(end)
}

// sync orders the group's memory accesses.
func (f *fn) sync() {
	if f.width > 32 {
		f.groupSync()
	} else {
		f.ins("bar.warp.sync %s", f.mask)
	}
}

// shfl is r's value in lane (this lane ^ h).
func (f *fn) shfl(c class, r string, h int) string {
	t := f.reg(c)
	if c == c64 || c == cF64 {
		lo, hi, tlo, thi := f.reg(c32), f.reg(c32), f.reg(c32), f.reg(c32)
		f.ins("mov.b64 {%s, %s}, %s", lo, hi, r)
		f.ins("shfl.sync.bfly.b32 %s, %s, %d, 31, %s", tlo, lo, h, f.mask)
		f.ins("shfl.sync.bfly.b32 %s, %s, %d, 31, %s", thi, hi, h, f.mask)
		f.ins("mov.b64 %s, {%s, %s}", t, tlo, thi)
		return t
	}
	f.ins("shfl.sync.bfly.b32 %s, %s, %d, 31, %s", t, r, h, f.mask)
	return t
}

// tree combines accumulator v's partials (register r) into r in every
// thread of the group.
func (f *fn) tree(v *kernel.Var, r string) {
	c := classOf(v.Kind)
	if c == cPred {
		f.fail("accumulator %s: a Bool cannot be split over threads", v.Name)
		return
	}
	for h := min(f.width, 32) / 2; h >= 1; h /= 2 {
		f.mov(v.Kind, r, f.binop(v.Fold, v.Kind, r, f.shfl(c, r, h)))
	}
	if f.width <= 32 {
		return
	}
	// one value per warp through shared memory, then the halving
	bt := btypeOf(c)
	base, w, a := f.reg(c64), f.reg(c64), f.reg(c64)
	p := f.reg(cPred)
	if f.gred != "" {
		f.ins("mov.u64 %s, %s", base, f.gred)
	} else {
		f.ins("mov.u64 %s, %s", base, f.red)
	}
	f.groupSync() // the scratch's last readers are done
	f.ins("and.b64 %s, %s, 31", w, f.lane)
	f.ins("setp.eq.s64 %s, %s, 0", p, w)
	f.ins("shr.u64 %s, %s, 5", w, f.lane)
	f.ins("mad.lo.s64 %s, %s, 8, %s", a, w, base)
	f.ins("@%s st.shared.%s [%s], %s", p, bt, a, r)
	f.groupSync()
	s := make([]string, f.width/32)
	for i := range s {
		s[i] = f.reg(c)
		f.ins("ld.shared.%s %s, [%s+%d]", bt, s[i], base, 8*i)
	}
	for h := len(s) / 2; h >= 1; h /= 2 {
		for i := 0; i < h; i++ {
			s[i] = f.binop(v.Fold, v.Kind, s[i], s[i+h])
		}
	}
	f.mov(v.Kind, r, s[0])
}

// groupSync is the barrier of a group wider than a warp: the CTA's, or
// where several such groups share a CTA (a phased kernel's wider phase),
// the group's own named barrier.
func (f *fn) groupSync() {
	if f.gbar != "" {
		f.ins("bar.sync %s, %d", f.gbar, f.width)
		return
	}
	f.ins("bar.sync 0")
}

// groupSlots gives each group wider than a warp, where several share the
// CTA, a named barrier (1 up) and its own slots of the shared scratch.
func (f *fn) groupSlots(tid string) {
	f.gbar, f.gred = "", ""
	if f.width <= 32 || f.cta <= f.width {
		return
	}
	g := f.reg(c32)
	f.ins("shr.u32 %s, %s, %d", g, tid, log2(f.width))
	f.gbar = f.reg(c32)
	f.ins("add.u32 %s, %s, 1", f.gbar, g)
	f.gred = f.reg(c64)
	f.ins("mov.u64 %s, %s", f.gred, f.red)
	w := f.reg(c64)
	f.ins("cvt.u64.u32 %s, %s", w, g)
	f.ins("mad.lo.s64 %s, %s, %d, %s", f.gred, w, 8*f.width/32, f.gred)
}
