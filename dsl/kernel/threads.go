package kernel

import "fmt"

// Cooperative loops. A loop scheduled with Threads: W runs on W threads
// that cooperate (a GPU warp, or a CTA for W > 32). Everything outside
// such loops runs in every one of the W threads alike; the loop itself is
// split: thread t runs iterations lo+t·step, lo+(t+W)·step, … in order.
// An accumulator declared outside the loop and folded inside it becomes a
// partial per thread: for OpAdd it starts at zero and the combined partials
// are added to the accumulator's value from before the loop; for OpMax and
// OpMin it starts at that value and the combined partials replace it. Reads
// of such an accumulator inside the loop see the thread's partial.
//
// The partials p[0..W) combine by a fixed tree, the one a GPU runs with
// shuffles and shared memory: within each group of 32 (all of them when
// W ≤ 32) a butterfly, p[i] = p[i] ∘ p[i^h] for h = 16 (or W/2), …, 2, 1,
// after which every thread of a group holds its group's value (∘ is
// commutative, so both ends of each pair compute the same value); then,
// for W > 32, the group values s[g] halve: s[i] = s[i] ∘ s[i+h] for
// h = W/64, …, 1, and s[0] is the combined value. Every thread ends with
// the same accumulator.
//
// Stores inside the loop are the thread's own; a loop that stores orders
// those stores before any later access of the other threads (a warp or
// CTA barrier on the GPU). A loop with Threads may not nest in another,
// may not Set an outer accumulator, and every such loop of a kernel has
// the same W.

// MaxThreads is the widest cooperative loop: one CTA.
const MaxThreads = 1024

func threadsOf(s Schedule) map[string]int {
	m := map[string]int{}
	for name, ls := range s {
		if ls.Threads != 0 {
			m[name] = ls.Threads
		}
	}
	return m
}

func hasThreads(s Schedule) bool {
	for _, ls := range s {
		if ls.Threads != 0 {
			return true
		}
	}
	return false
}

// checkThreads checks the cooperative loops of a scheduled body.
func checkThreads(body []*Stmt) error {
	w := 0
	var walk func(ss []*Stmt, in *Stmt) error
	walk = func(ss []*Stmt, in *Stmt) error {
		for _, s := range ss {
			if bw := blockWidth(s); bw != 0 {
				switch {
				case in != nil:
					return fmt.Errorf("block statement inside loop %s, which has Threads", in.Var.Name)
				case w != 0 && bw != w:
					return fmt.Errorf("block statement of %d threads where another has %d (one width a kernel)", bw, w)
				}
				w = bw
				continue
			}
			if s.Op == SFor && s.Threads != 0 {
				switch {
				case s.Threads < 2 || s.Threads > MaxThreads || s.Threads&(s.Threads-1) != 0:
					return fmt.Errorf("loop %s: Threads %d is not a power of two in [2, %d]", s.Var.Name, s.Threads, MaxThreads)
				case in != nil:
					return fmt.Errorf("loop %s: Threads inside loop %s, which has Threads too", s.Var.Name, in.Var.Name)
				case w != 0 && s.Threads != w:
					return fmt.Errorf("loop %s: Threads %d where another loop has %d (one width a kernel)", s.Var.Name, s.Threads, w)
				}
				w = s.Threads
				if err := checkThreadBody(s); err != nil {
					return err
				}
				if err := walk(s.Body, s); err != nil {
					return err
				}
				continue
			}
			if err := walk(s.Body, in); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(body, nil)
}

func checkThreadBody(l *Stmt) error {
	local := declared(l.Body)
	var err error
	var walk func([]*Stmt)
	walk = func(ss []*Stmt) {
		for _, s := range ss {
			if s.Op == SSet && !local[s.Var] && err == nil {
				err = fmt.Errorf("loop %s: Set of %s, declared outside this loop with Threads", l.Var.Name, s.Var.Name)
			}
			walk(s.Body)
		}
	}
	walk(l.Body)
	return err
}

// declared is the set of variables declared in ss, at any depth.
func declared(ss []*Stmt) map[*Var]bool {
	m := map[*Var]bool{}
	var walk func([]*Stmt)
	walk = func(ss []*Stmt) {
		for _, s := range ss {
			switch s.Op {
			case SLet, SAcc, SFor:
				m[s.Var] = true
			}
			walk(s.Body)
		}
	}
	walk(ss)
	return m
}

// ThreadAccs lists the accumulators a cooperative loop l splits into
// per-thread partials (those folded in l and declared outside it), in
// order of first fold.
func ThreadAccs(l *Stmt) []*Var {
	local := declared(l.Body)
	seen := map[*Var]bool{}
	var out []*Var
	var walk func([]*Stmt)
	walk = func(ss []*Stmt) {
		for _, s := range ss {
			if s.Op == SFold && !local[s.Var] && !seen[s.Var] {
				seen[s.Var] = true
				out = append(out, s.Var)
			}
			walk(s.Body)
		}
	}
	walk(l.Body)
	return out
}

// Any reports whether f holds for a statement of ss or of any body in
// them, at any depth.
func Any(ss []*Stmt, f func(*Stmt) bool) bool {
	for _, s := range ss {
		if f(s) || Any(s.Body, f) {
			return true
		}
	}
	return false
}

// Stores reports whether ss store anywhere.
func Stores(ss []*Stmt) bool {
	return Any(ss, func(s *Stmt) bool {
		return s.Op == SStore || s.Op == STileStore || s.Op == SBlockMatMul || s.Op == SBlockAttention
	})
}

// threadLoop interprets cooperative loop s: the threads one after another,
// then the tree.
func (m *machine) threadLoop(s *Stmt) {
	lo, hi := m.eval(s.Lo).i, m.eval(s.Hi).i
	w := s.Threads
	accs := m.accsOf(s)
	before := make([]val, len(accs))
	parts := make([][]val, len(accs))
	for a, v := range accs {
		before[a] = m.vars[v.ID]
		parts[a] = make([]val, w)
	}
	for t := 0; t < w; t++ {
		for a, v := range accs {
			if v.Fold == OpAdd {
				m.vars[v.ID] = val{} // zero of any kind
			} else {
				m.vars[v.ID] = before[a]
			}
		}
		for i := lo + int64(t)*int64(s.Step); i < hi; i += int64(w) * int64(s.Step) {
			m.vars[s.Var.ID] = val{i: i}
			m.stmts(s.Body)
		}
		for a, v := range accs {
			parts[a][t] = m.vars[v.ID]
		}
	}
	for a, v := range accs {
		c := m.combine(v.Fold, v.Kind, parts[a])
		if v.Fold == OpAdd {
			c = m.arith(OpAdd, v.Kind, before[a], c, val{})
		}
		m.vars[v.ID] = c
	}
}

func (m *machine) accsOf(s *Stmt) []*Var {
	if m.accs == nil {
		m.accs = map[*Stmt][]*Var{}
	}
	a, ok := m.accs[s]
	if !ok {
		a = ThreadAccs(s)
		m.accs[s] = a
	}
	return a
}

// combine is the tree of the package comment over partials p (changed).
func (m *machine) combine(op Op, k Kind, p []val) val {
	g := min(len(p), 32)
	q := make([]val, len(p))
	for h := g / 2; h >= 1; h /= 2 {
		for i := range p {
			q[i] = m.arith(op, k, p[i], p[i^h], val{})
		}
		p, q = q, p
	}
	if len(p) <= 32 {
		return p[0]
	}
	s := make([]val, len(p)/32)
	for i := range s {
		s[i] = p[32*i]
	}
	for h := len(s) / 2; h >= 1; h /= 2 {
		for i := 0; i < h; i++ {
			s[i] = m.arith(op, k, s[i], s[i+h], val{})
		}
	}
	return s[0]
}

// Aligned is a load of kind k (U16 or U32 from a byte buffer, or any
// element load) whose byte offset from the start of its root buffer must be
// a multiple of k's size: GPU targets then load it in one access rather
// than byte by byte. The interpreter reports a misaligned one as an error.
func (b *Buf) Aligned(k Kind, off any) Expr {
	e := b.load(k, off)
	if e.Err == nil {
		e.Aligned = true
	}
	return e
}
