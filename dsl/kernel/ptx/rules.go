package ptx

import (
	"fmt"
	"reflect"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// schedule is the kernel's schedule, overridden by o, in the form this
// target runs: a Lanes hint becomes unrolled copies (independent work for
// one thread to overlap), and the loops that become the grid keep no Split
// or Unroll (either would leave several top-level loops, and the grid
// already spreads their iterations).
func schedule(k *kernel.Kernel, o kernel.Schedule) kernel.Schedule {
	s := k.Schedule.With(o)
	for name, ls := range s {
		if ls.Lanes > 1 && ls.Unroll == 0 {
			ls.Unroll = ls.Lanes
		}
		ls.Lanes = 0
		s[name] = ls
	}
	for _, st := range k.Body {
		if st.Op == kernel.SFor && st.Loop == kernel.Parallel {
			s[st.Var.Name] = kernel.LoopSchedule{}
		}
	}
	return s
}

// lower applies the target's schedule and picks the grid loop.
func lower(k *kernel.Kernel, t Target) (*kernel.Kernel, *kernel.Stmt, error) {
	lk, err := kernel.Apply(k, schedule(k, t.Schedule))
	if err != nil {
		return nil, nil, err
	}
	return lk, gridLoop(lk.Body), nil
}

// gridLoop is the ParallelFor spread over the grid: the only top-level
// parallel loop, where nothing else at the top level stores (top-level code
// runs in every thread, so it must be pure). Without one the kernel runs on
// thread 0 alone, in the interpreter's order.
func gridLoop(body []*kernel.Stmt) *kernel.Stmt {
	var g *kernel.Stmt
	for _, s := range body {
		if s.Op == kernel.SFor && s.Loop == kernel.Parallel {
			if g != nil {
				return nil
			}
			g = s
		}
	}
	if g == nil {
		return nil
	}
	for _, s := range body {
		if s != g && kernel.Stores([]*kernel.Stmt{s}) {
			return nil
		}
	}
	return g
}

// Launch says how a rendered entry spreads its work.
type Launch struct {
	// Loop names the ParallelFor whose iterations are spread over the grid's
	// threads; "" when the kernel runs on thread 0 (other threads exit).
	Loop string
	// Group is the threads that run each grid iteration together (the
	// width of the kernel's cooperative loops, 1 without): the CTA size
	// must be a multiple of it (of 32 too where it is over 32, and exactly
	// it then). Without a grid loop, threads 0..Group-1 of CTA 0 work.
	Group int
	// Shared is the dynamic shared memory a CTA needs, in bytes (block
	// statements' stages): the launch passes it, and a function over 48
	// KiB must first be allowed it (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
	// A group that uses it is a CTA of its own (it would share it else).
	Shared int
	// Stages is the dynamic shared memory a CTA's stages take
	// (kernel.Stage: each group's slots), passed beside Shared; it does
	// not tie the CTA to the group.
	Stages int
	// Resident says the kernel's CTAs meet at grid barriers (a phased
	// kernel, kernel.Phases): every CTA launched must be resident at once,
	// so the grid is at most what fits (occupancy times the SMs); any such
	// grid is correct.
	Resident bool
}

// CTA is the CTA size to launch threads threads with, at most max where
// the kernel leaves it free: exactly the group where the group is wider
// than a warp or uses shared memory, else up to max.
func (l Launch) CTA(threads, max int) int {
	if l.Group > 32 || l.Shared > 0 {
		return l.Group
	}
	return min(threads, max)
}

// Plan is the launch of k rendered for t.
func Plan(k *kernel.Kernel, t Target) (Launch, error) {
	if k.Epilogue != nil {
		ps, _, err := lowerPhases(k, t)
		if err != nil {
			return Launch{}, err
		}
		return Launch{Group: ps[0].width, Loop: ps[0].grid.Var.Name, Stages: epilogueStages(t, k, ps[0])}, nil // the producer's grid
	}
	if k.Local != nil {
		ps, _, err := lowerPhases(k, t)
		if err != nil {
			return Launch{}, err
		}
		return Launch{Group: k.Local.CTA, Stages: localStages(t, k, ps[0])}, nil // any grid; CTAs of exactly the kernel's
	}
	if len(k.Phases) > 0 {
		ps, w, err := lowerPhases(k, t) // no block statements: only the stages' shared memory
		if err != nil {
			return Launch{}, err
		}
		return Launch{Group: w, Resident: true, Stages: phasedStages(t, ps, w)}, nil
	}
	lk, g, err := lower(k, t)
	if err != nil {
		return Launch{}, err
	}
	l := Launch{Group: width(lk.Body), Shared: blockShared(lk.Body, t.WGMMA), Stages: gridStages(t, k, lk.Body, g)}
	if g != nil {
		l.Loop = g.Var.Name
	}
	return l, nil
}

// Elems stands for a buffer of n elements in Threads' arguments, when the
// caller holds device memory rather than a Go slice.
type Elems int

// Threads is how many threads k, rendered for t, can keep busy with these
// arguments: the grid loop's trip count times the group (Launch.Group),
// or the group for a kernel without a grid loop. args
// follow k.Params as kernel.Run's do, except that a buffer may be any slice
// or an Elems. Launching fewer threads is correct (each loops), more is
// harmless.
func Threads(k *kernel.Kernel, t Target, args ...any) (int, error) {
	if len(k.Phases) > 0 {
		// the most any phase keeps busy (a resident grid loops over the rest)
		per, err := kernel.PhaseArgs(k, args)
		if err != nil {
			return 0, fmt.Errorf("ptx: %w", err)
		}
		n := 0
		for i, p := range k.Phases {
			m, err := Threads(p, t, per[i]...)
			if err != nil {
				return 0, err
			}
			if l := k.Local; l != nil {
				// the CTAs whose shares of groups cover the phase
				lp, _, err := lower(p, t)
				if err != nil {
					return 0, err
				}
				w := width(lp.Body)
				g := l.Groups(i, w)
				m = (m/w + g - 1) / g * l.CTA
			}
			n = max(n, m)
		}
		return n, nil
	}
	lk, g, err := lower(k, t)
	if err != nil {
		return 0, err
	}
	w := width(lk.Body)
	if g == nil {
		return w, nil
	}
	if len(args) != len(lk.Params) {
		return 0, fmt.Errorf("ptx: kernel %s: %d arguments for %d parameters", k.Name, len(args), len(lk.Params))
	}
	h := &host{vars: map[*kernel.Var]int64{}, lens: map[*kernel.Buf]int64{}, lets: map[*kernel.Var]kernel.Expr{}}
	for i, p := range lk.Params {
		if p.Buf != nil {
			if n, ok := args[i].(Elems); ok {
				h.lens[p.Buf] = int64(n)
			} else if v := reflect.ValueOf(args[i]); v.Kind() == reflect.Slice {
				h.lens[p.Buf] = int64(v.Len())
			} else {
				return 0, fmt.Errorf("ptx: kernel %s: buffer %s given a %T", k.Name, p.Buf.Name, args[i])
			}
			continue
		}
		switch x := args[i].(type) {
		case int:
			h.vars[p.Var] = int64(x)
		case int32:
			h.vars[p.Var] = int64(x)
		}
	}
	for _, s := range lk.Body {
		if s == g {
			break
		}
		if s.Op == kernel.SLet {
			h.lets[s.Var] = s.Value
		}
	}
	lo, hi := h.eval(g.Lo), h.eval(g.Hi)
	if h.err != nil {
		return 0, fmt.Errorf("ptx: kernel %s: grid loop %s: %v", k.Name, g.Var.Name, h.err)
	}
	n := (hi - lo + int64(g.Step) - 1) / int64(g.Step)
	return int(max(n, 1)) * w, nil
}

// host evaluates the integer expressions a grid loop's bounds are made of.
type host struct {
	vars map[*kernel.Var]int64
	lens map[*kernel.Buf]int64
	lets map[*kernel.Var]kernel.Expr
	err  error
}

func (h *host) eval(e kernel.Expr) int64 {
	if h.err != nil {
		return 0
	}
	switch e.Op {
	case kernel.OpConst:
		return e.Int
	case kernel.OpLen:
		if n, ok := h.lens[e.Buf]; ok {
			return n
		}
	case kernel.OpVar:
		if v, ok := h.vars[e.Var]; ok {
			return v
		}
		if x, ok := h.lets[e.Var]; ok {
			return h.eval(x)
		}
	case kernel.OpCvt:
		if e.Kind.IsInt() && e.Args[0].Kind.IsInt() {
			return wrapTo(e.Kind, h.eval(e.Args[0]))
		}
	case kernel.OpAdd, kernel.OpSub, kernel.OpMul, kernel.OpDiv, kernel.OpMin, kernel.OpMax:
		if e.Kind.IsInt() {
			a, b := h.eval(e.Args[0]), h.eval(e.Args[1])
			switch e.Op {
			case kernel.OpAdd:
				return wrapTo(e.Kind, a+b)
			case kernel.OpSub:
				return wrapTo(e.Kind, a-b)
			case kernel.OpMul:
				return wrapTo(e.Kind, a*b)
			case kernel.OpMin:
				return min(a, b)
			case kernel.OpMax:
				return max(a, b)
			}
			if b == 0 {
				h.err = fmt.Errorf("integer divide by zero")
				return 0
			}
			return wrapTo(e.Kind, a/b)
		}
	}
	h.err = fmt.Errorf("bound needs %s of %s, which the host cannot evaluate", e.Op, e.Kind)
	return 0
}

// wrapTo truncates v to integer kind k, as a Go conversion does.
func wrapTo(k kernel.Kind, v int64) int64 {
	switch k {
	case kernel.U8:
		return int64(uint8(v))
	case kernel.I8:
		return int64(int8(v))
	case kernel.U16:
		return int64(uint16(v))
	case kernel.U32:
		return int64(uint32(v))
	case kernel.I32:
		return int64(int32(v))
	}
	return v
}
