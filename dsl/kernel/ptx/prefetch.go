package ptx

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// Programmatic dependent launch (Target.Dependent, sm_90 on). A decode
// step is a chain of short kernels, each reading what the one before
// wrote; launched with programmatic stream serialization, a kernel's CTAs
// start while the one before still runs, and wait for it where they first
// need its results (griddepcontrol.wait: it has completed and its stores
// are visible). What they do before the wait hides the launch and, with
// kernel.Prefetch, the first trip to memory: a mat-vec's weight rows
// (no launch writes them) are already on their way into L2. Right after
// its wait a kernel lets the next one launch (griddepcontrol.launch_dependents),
// so at most one kernel waits ahead of the one running (letting it launch
// at entry instead, several ahead, was 7-11% slower on the H200).

// depWait renders the wait for the kernel before and the early launch of
// the one after.
func (f *fn) depWait() {
	f.ins("griddepcontrol.wait")
	f.traceWait()
	if !f.launched {
		f.ins("griddepcontrol.launch_dependents")
	}
	f.waited = true
}

// launchEarly renders Target.LaunchEarly's launch of the kernel after at
// entry: depWait then leaves it out.
func (f *fn) launchEarly() {
	f.ins("griddepcontrol.launch_dependents")
	f.launched = true
}

// prefetchStmt renders kernel.Prefetch: the group's threads take the
// range's 128-byte lines in turn (prefetch.global.L2); where there is no
// wait to hide (no dependent launch, no phase barrier before it) it
// renders nothing.
func (f *fn) prefetchStmt(s *kernel.Stmt) {
	if !f.prefetch {
		f.out.WriteString("\t// prefetch: no wait to overlap\n")
		return
	}
	b := f.buf(s.Buf)
	if b == nil {
		return
	}
	base, off := f.addr(b, s.Index, s.Buf.Elem.Bytes())
	start, end := f.reg(c64), f.reg(c64)
	f.ins("add.s64 %s, %s, %d", start, base, off)
	n := f.expr(s.Hi)
	f.ins("mad.lo.s64 %s, %s, %d, %s", end, n, s.Buf.Elem.Bytes(), start)
	a := f.reg(c64)
	if f.lane != "" {
		f.ins("mad.lo.s64 %s, %s, 128, %s", a, f.lane, start)
	} else {
		f.ins("mov.b64 %s, %s", a, start)
	}
	head, done := f.label(), f.label()
	p := f.reg(cPred)
	f.place(head)
	f.ins("setp.ge.u64 %s, %s, %s", p, a, end)
	f.ins("@%s bra %s", p, done)
	f.ins("prefetch.global.L2 [%s]", a)
	f.ins("add.s64 %s, %s, %d", a, a, 128*max(f.width, 1))
	f.ins("bra %s", head)
	f.place(done)
}

// hasPrefetch reports whether a body prefetches or stages anywhere.
func hasPrefetch(body []*kernel.Stmt) bool {
	return kernel.Any(body, early)
}

// prefetchFirst checks that a kernel that prefetches loads nothing before
// its first prefetch, in program order: the wait comes after it, and a
// load before the wait could read what the kernel before has not yet
// written.
func prefetchFirst(body []*kernel.Stmt) error {
	if !hasPrefetch(body) {
		return nil
	}
	var err error
	var walk func([]*kernel.Stmt) bool // true once the first prefetch is met
	walk = func(ss []*kernel.Stmt) bool {
		for _, s := range ss {
			if early(s) {
				if prefetchLoop(s) && kernel.Any([]*kernel.Stmt{s}, stmtLoads) && err == nil {
					err = fmt.Errorf("a load in a loop of prefetches (it would run before the wait for the kernel before)")
				}
				return true
			}
			if stmtLoads(s) && err == nil {
				err = fmt.Errorf("a load before the first prefetch (it would run before the wait for the kernel before)")
			}
			if s.Op != kernel.SFor && s.Op != kernel.SBlock && s.Op != kernel.SView && s.Op != kernel.SLet && s.Op != kernel.SAcc {
				if err == nil {
					err = fmt.Errorf("statement %d before the first prefetch", s.Op)
				}
			}
			if walk(s.Body) {
				return true
			}
		}
		return false
	}
	walk(body)
	return err
}

// settled reports whether b, or the buffer it is a window of, is
// kernel.Buf.Settled: loadable before the wait for the kernel before.
func settled(b *kernel.Buf) bool {
	for ; b != nil; b = b.Parent {
		if b.Settled {
			return true
		}
	}
	return false
}

// stmtLoads reports whether s's own expressions read memory a kernel
// before may write.
func stmtLoads(s *kernel.Stmt) bool {
	for _, e := range []kernel.Expr{s.Value, s.Index, s.Lo, s.Hi} {
		if loads(e) {
			return true
		}
	}
	return false
}

// loads reports whether e reads memory a kernel before may write (a
// settled buffer's loads do not count).
func loads(e kernel.Expr) bool {
	if e == nil {
		return false
	}
	if e.Op == kernel.OpLoad && !settled(e.Buf) {
		return true
	}
	for _, a := range e.Args {
		if loads(a) {
			return true
		}
	}
	return false
}
