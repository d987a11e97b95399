package kernel

import "fmt"

// LoopSchedule is how one loop runs; zero fields leave it alone. The
// schedule never changes results: Split and Unroll keep the iteration order,
// and Lanes is a hint that each target maps to what it has (SIMD lanes,
// threads, or, on the Go target, unrolled copies).
type LoopSchedule struct {
	Split  int // tile into an outer loop of Split-wide chunks and an inner loop
	Unroll int // copies of the body per iteration (all of them when the trip count is smaller and constant)
	Lanes  int // independent-iteration width hint

	// Order, in an entry named after an accumulator rather than a loop, is
	// that accumulator's accumulation order (order.go): unlike the fields
	// above it changes results, so the interpreter honours a kernel's
	// default Orders too.
	Order Order

	// Threads splits the loop over that many cooperating threads (a power
	// of two from 2 to 1024; threads.go): like Order it is part of what the
	// kernel computes (the partial sums' tree), so the interpreter honours
	// a kernel's default Threads. Split leaves such a loop alone; Unroll
	// becomes Stmt.Unroll, a target's hint (each thread's order is kept).
	Threads int
}

// Schedule maps loop names to their schedule.
type Schedule map[string]LoopSchedule

// With is s overridden by o, loop by loop (a target's say over a kernel's).
func (s Schedule) With(o Schedule) Schedule {
	r := Schedule{}
	for k, v := range s {
		r[k] = v
	}
	for k, v := range o {
		r[k] = v
	}
	return r
}

// Apply lowers the Split and Unroll of s into plain loops and blocks,
// returning a new kernel (k is not changed). Lanes is left to the target,
// which rewrites it into Split or Unroll before calling Apply.
//
// Orders are lowered first, from k's default schedule overridden by s: an
// accumulator's order is part of what the kernel computes, so a target
// scheduling only loops keeps it.
func Apply(k *Kernel, s Schedule) (*Kernel, error) {
	os := k.Schedule.With(s)
	if hasOrders(os) {
		var err error
		if k, err = lowerOrders(k, os); err != nil {
			return nil, err
		}
	}
	a := &applier{s: s, next: k.NVars, threads: threadsOf(os)}
	body := a.stmts(k.Body)
	if a.err == nil {
		a.err = checkThreads(body)
	}
	if a.err != nil {
		return nil, fmt.Errorf("kernel %s: %v", k.Name, a.err)
	}
	out := *k
	out.Body = body
	out.NVars = a.next
	out.Schedule = Schedule{}
	return &out, nil
}

type applier struct {
	s       Schedule
	next    int            // next free Var ID
	threads map[string]int // loop name -> Threads, from the default schedule overridden by s
	err     error
}

func (a *applier) newLoopVar(name string) *Var {
	v := &Var{Name: name, Kind: Int, Role: RoleLoop, ID: a.next}
	a.next++
	return v
}

func (a *applier) stmts(in []*Stmt) []*Stmt {
	var out []*Stmt
	for _, s := range in {
		if s.Op == SFor {
			out = append(out, a.loop(s)...)
			continue
		}
		c := *s
		c.Body = a.stmts(s.Body)
		out = append(out, &c)
	}
	return out
}

func (a *applier) loop(s *Stmt) []*Stmt {
	ls := a.s[s.Var.Name]
	body := a.stmts(s.Body)
	if s.fixed || s.Threads > 1 { // an Order's lane loop (its step is its lanes), or already split over threads
		c := *s
		c.Body = body
		return []*Stmt{&c}
	}
	if w := a.threads[s.Var.Name]; w > 1 {
		if s.Loop != Serial {
			a.fail("loop %s: Threads on a ParallelFor (the grid spreads those)", s.Var.Name)
		}
		c := *s
		c.Body, c.Threads = body, w
		if ls.Unroll > 1 {
			c.Unroll = ls.Unroll
		}
		return []*Stmt{&c}
	}
	loop := &Stmt{Op: SFor, Var: s.Var, Lo: s.Lo, Hi: s.Hi, Step: s.Step, Loop: s.Loop, Body: body}
	if ls.Split > 1 {
		// for o := lo; o < hi; o += f*step { for i := o; i < min(o+f*step, hi); i += step }
		o := a.newLoopVar(s.Var.Name + "o")
		w := ls.Split * s.Step
		inner := &Stmt{Op: SFor, Var: s.Var, Lo: o.Get(), Hi: o.Get().Add(w).Min(s.Hi), Step: s.Step, Loop: s.Loop, Body: body}
		loop = &Stmt{Op: SFor, Var: o, Lo: s.Lo, Hi: s.Hi, Step: w, Loop: s.Loop, Body: []*Stmt{inner}}
		if ls.Unroll > 1 {
			inner.Body = nil
			return []*Stmt{{Op: SFor, Var: o, Lo: s.Lo, Hi: s.Hi, Step: w, Loop: s.Loop,
				Body: a.unroll(inner, body, ls.Unroll)}}
		}
		return []*Stmt{loop}
	}
	if ls.Unroll > 1 {
		return a.unroll(loop, body, ls.Unroll)
	}
	return []*Stmt{loop}
}

func (a *applier) fail(format string, args ...any) {
	if a.err == nil {
		a.err = fmt.Errorf(format, args...)
	}
}

// unroll makes u copies of body per iteration of l. Constant bounds with a
// trip count of at most u unroll fully; otherwise a main loop steps by u and
// a remainder loop finishes (step-1 loops only).
func (a *applier) unroll(l *Stmt, body []*Stmt, u int) []*Stmt {
	v := l.Var
	if l.Lo.Op == OpConst && l.Hi.Op == OpConst {
		trip := (l.Hi.Int - l.Lo.Int + int64(l.Step) - 1) / int64(l.Step)
		if trip <= int64(u) {
			var out []*Stmt
			for t := int64(0); t < trip; t++ {
				out = append(out, &Stmt{Op: SBlock, Body: substStmts(body, v, I(int(l.Lo.Int+t*int64(l.Step))))})
			}
			return out
		}
	}
	if l.Step != 1 {
		if a.err == nil {
			a.err = fmt.Errorf("unroll of loop %s with step %d", v.Name, l.Step)
		}
		return []*Stmt{{Op: SFor, Var: v, Lo: l.Lo, Hi: l.Hi, Step: l.Step, Loop: l.Loop, Body: body}}
	}
	main := &Stmt{Op: SFor, Var: v, Lo: l.Lo, Hi: l.Hi.Sub(u - 1), Step: u, Loop: l.Loop}
	for c := 0; c < u; c++ {
		main.Body = append(main.Body, &Stmt{Op: SBlock, Body: substStmts(body, v, v.Get().Add(c))})
	}
	out := []*Stmt{main}
	// the remainder starts where the main loop stopped: lo + floor((hi-lo)/u)*u
	start := l.Lo.Add(l.Hi.Sub(l.Lo).Max(0).Div(u).Mul(u))
	if start.Op != OpConst || start.Int < l.Hi.Int {
		out = append(out, &Stmt{Op: SFor, Var: v, Lo: start, Hi: l.Hi, Step: 1, Loop: l.Loop, Body: body})
	}
	return out
}

// subst replaces reads of v by r in e, refolding constants.
func subst(e Expr, v *Var, r Expr) Expr {
	if e == nil {
		return nil
	}
	if e.Op == OpVar && e.Var == v {
		return r
	}
	if len(e.Args) == 0 {
		return e
	}
	args := make([]Expr, len(e.Args))
	changed := false
	for i, x := range e.Args {
		args[i] = subst(x, v, r)
		changed = changed || args[i] != x
	}
	if !changed {
		return e
	}
	n := *e
	n.Args = args
	if f, ok := fold(&n); ok {
		return f
	}
	return &n
}

func substStmts(in []*Stmt, v *Var, r Expr) []*Stmt {
	out := make([]*Stmt, len(in))
	for i, s := range in {
		c := *s
		c.Value, c.Index = subst(s.Value, v, r), subst(s.Index, v, r)
		c.Lo, c.Hi = subst(s.Lo, v, r), subst(s.Hi, v, r)
		if s.Args != nil {
			c.Args = make([]Expr, len(s.Args))
			for j, a := range s.Args {
				c.Args[j] = subst(a, v, r)
			}
		}
		c.Body = substStmts(s.Body, v, r)
		out[i] = &c
	}
	return out
}

// Loops lists the names of k's loops, outermost first, each once.
func Loops(k *Kernel) []string {
	var out []string
	seen := map[string]bool{}
	var walk func([]*Stmt)
	walk = func(ss []*Stmt) {
		for _, s := range ss {
			if s.Op == SFor && !seen[s.Var.Name] {
				seen[s.Var.Name] = true
				out = append(out, s.Var.Name)
			}
			walk(s.Body)
		}
	}
	walk(k.Body)
	return out
}
