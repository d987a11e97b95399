package kernel

import (
	"fmt"
	"math/bits"
)

// Tree is how an Order's partial accumulators combine at the end.
type Tree uint8

const (
	// TreeSerial adds them to the accumulator one at a time:
	// ((acc + p0) + p1) + … (ggml's generic k-quant kernels, sums[8]).
	TreeSerial Tree = iota
	// TreeHalving folds the upper half onto the lower, p[i] += p[i+h] for
	// h = n/2, n/4, …, 1, then adds p[0] to the accumulator: a SIMD
	// register's horizontal sum (_mm512_reduce_add_ps, hsum_float_8, and
	// ggml's sum[0] += sum[2] over its four registers before it).
	TreeHalving
)

// Order is the accumulation order of one accumulator, set in a Schedule
// entry under the accumulator's name. It is the one schedule knob that
// changes results: a reduction's value in real arithmetic is the
// algorithm's, but where it rounds is the order's, and a target that must
// match another program's bits (llama.cpp's SIMD kernels) says so here
// rather than in a second kernel. The zero Order is the algorithm's own:
// one accumulator, folded in program order.
type Order struct {
	// Kind retypes the accumulator (a fold's widening to the old kind is
	// dropped, reads are widened back); 0 keeps the algorithm's.
	Kind Kind
	// Fused makes each fold of a product f1·f2·…·fn into the accumulator one
	// fused multiply-add, acc = fma(f1, f2·…·fn, acc), the rest of the
	// product taken left to right (a scale product formed once per block).
	Fused bool

	// Chunk, over the integer Sum loop named ChunkLoop, splits the sum into
	// chunks of Chunk iterations and folds each chunk's sum separately into
	// the accumulator: the fold right after the loop must be linear in the
	// sum (products and conversions of it), and since integer sums are
	// exact only the float side changes. The chunk loop is named
	// ChunkLoop+"c", for LaneLoop (ggml's AVX2 kernels keep one float lane
	// per four byte products).
	Chunk     int
	ChunkLoop string

	// Lanes partial accumulators, of kind LaneKind (0: the accumulator's),
	// fused as Fused says for the accumulator: iteration lo+t of the loop
	// named LaneLoop, for t below the last whole multiple of Lanes, folds
	// into partial t mod Lanes; the rest (the tail) folds into the
	// accumulator itself, after the partials are combined by Tree where the
	// lane loop is the accumulator's own, else after the outermost loop
	// holding it.
	Lanes     int
	LaneLoop  string
	LaneKind  Kind
	LaneFused bool
	Tree      Tree
}

func hasOrders(s Schedule) bool {
	for _, ls := range s {
		if ls.Order != (Order{}) {
			return true
		}
	}
	return false
}

// lowerOrders rewrites the accumulators that s gives an Order into plain
// statements (partials, SSet FMAs, combining folds). The kernel it returns
// has no Orders left in its schedule.
func lowerOrders(k *Kernel, s Schedule) (*Kernel, error) {
	o := &orderer{s: s, next: k.NVars, result: k.Result}
	body := o.list(k.Body)
	if o.err != nil {
		return nil, fmt.Errorf("kernel %s: %v", k.Name, o.err)
	}
	out := *k
	out.Body, out.Result, out.NVars = body, o.result, o.next
	out.Schedule = Schedule{}
	for name, ls := range k.Schedule {
		ls.Order = Order{}
		out.Schedule[name] = ls
	}
	return &out, nil
}

type orderer struct {
	s      Schedule
	next   int
	result Expr
	err    error
}

func (o *orderer) fail(format string, args ...any) {
	if o.err == nil {
		o.err = fmt.Errorf(format, args...)
	}
}

func (o *orderer) newVar(name string, k Kind, r Role) *Var {
	v := &Var{Name: name, Kind: k, Role: r, ID: o.next, Fold: OpAdd}
	o.next++
	return v
}

// list lowers the accumulators declared in ss (inner scopes first).
func (o *orderer) list(ss []*Stmt) []*Stmt {
	out := make([]*Stmt, len(ss))
	var accs []*Var
	for i, s := range ss {
		c := *s
		c.Body = o.list(s.Body)
		out[i] = &c
		if s.Op == SAcc && o.s[s.Var.Name].Order != (Order{}) {
			accs = append(accs, s.Var)
		}
	}
	for _, a := range accs {
		out = o.acc(out, a, o.s[a.Name].Order)
	}
	return out
}

func indexOfAcc(ss []*Stmt, a *Var) int {
	for i, s := range ss {
		if s.Op == SAcc && s.Var == a {
			return i
		}
	}
	return -1
}

func (o *orderer) acc(ss []*Stmt, a *Var, ord Order) []*Stmt {
	if a.Fold != OpAdd || !a.Kind.IsFloat() {
		o.fail("order of %s: not a float sum", a.Name)
		return ss
	}
	if ord.Chunk > 0 {
		i := indexOfAcc(ss, a)
		n := 0
		rest := o.chunk(ss[i+1:], a, ord, &n)
		if n == 0 {
			o.fail("order of %s: no fold of an integer Sum over loop %s", a.Name, ord.ChunkLoop)
		}
		ss = append(append([]*Stmt{}, ss[:i+1]...), rest...)
	}
	if ord.Lanes > 1 {
		ss = o.lanes(ss, a, ord)
	}
	if (ord.Kind != 0 && ord.Kind != a.Kind) || ord.Fused {
		ss = o.retype(ss, a, ord)
	}
	return ss
}

// reads counts the reads of v in e.
func reads(e Expr, v *Var) int {
	if e == nil {
		return 0
	}
	n := 0
	if e.Op == OpVar && e.Var == v {
		n++
	}
	for _, x := range e.Args {
		n += reads(x, v)
	}
	return n
}

func stmtReads(ss []*Stmt, v *Var) int {
	n := 0
	for _, s := range ss {
		n += reads(s.Value, v) + reads(s.Index, v) + reads(s.Lo, v) + reads(s.Hi, v) + stmtReads(s.Body, v)
		for _, a := range s.Args {
			n += reads(a, v)
		}
	}
	return n
}

// linear reports e a product (or negation) with one factor the conversion
// of s to a float.
func linear(e Expr, s *Var) bool {
	switch e.Op {
	case OpCvt:
		return e.Kind.IsFloat() && e.Args[0].Op == OpVar && e.Args[0].Var == s
	case OpNeg:
		return linear(e.Args[0], s)
	case OpMul:
		l, r := reads(e.Args[0], s), reads(e.Args[1], s)
		return l == 0 && linear(e.Args[1], s) || r == 0 && linear(e.Args[0], s)
	}
	return false
}

// chunk rewrites, anywhere in ss, "s := 0; for j {… s += …}; acc += f(s)"
// into "for jc { s := 0; for j in chunk jc {…}; acc += f(s) }".
func (o *orderer) chunk(ss []*Stmt, acc *Var, ord Order, n *int) []*Stmt {
	var out []*Stmt
	for i := 0; i < len(ss); i++ {
		s := ss[i]
		if i+2 < len(ss) {
			l, f := ss[i+1], ss[i+2]
			if s.Op == SAcc && s.Var.Kind.IsInt() && s.Var.Fold == OpAdd && l.Op == SFor && l.Var.Name == ord.ChunkLoop &&
				f.Op == SFold && f.Var == acc && linear(f.Value, s.Var) {
				if st := o.chunkLoop(s, l, f, ord); st != nil {
					if stmtReads(ss[i+3:], s.Var) > 0 {
						o.fail("order of %s: integer sum %s read after its fold", acc.Name, s.Var.Name)
					}
					out = append(out, st)
					*n++
					i += 2
					continue
				}
			}
		}
		c := *s
		c.Body = o.chunk(s.Body, acc, ord, n)
		out = append(out, &c)
	}
	return out
}

func (o *orderer) chunkLoop(s, l, f *Stmt, ord Order) *Stmt {
	if l.Lo.Op != OpConst || l.Hi.Op != OpConst || l.Step != 1 || (l.Hi.Int-l.Lo.Int)%int64(ord.Chunk) != 0 {
		o.fail("order: chunks of %d over loop %s need constant bounds it divides", ord.Chunk, l.Var.Name)
		return nil
	}
	jc := o.newVar(ord.ChunkLoop+"c", Int, RoleLoop)
	base := jc.Get().Mul(ord.Chunk).Add(int(l.Lo.Int))
	inner := &Stmt{Op: SFor, Var: l.Var, Lo: base, Hi: base.Add(ord.Chunk), Step: 1, Loop: l.Loop, Body: l.Body}
	trip := int(l.Hi.Int-l.Lo.Int) / ord.Chunk
	return &Stmt{Op: SFor, Var: jc, Lo: I(0), Hi: I(trip), Step: 1, Loop: Serial, Body: []*Stmt{s, inner, f}}
}

// retarget copies ss with every fold into from rewritten by fn.
func retarget(ss []*Stmt, from *Var, fn func(*Stmt) *Stmt) []*Stmt {
	out := make([]*Stmt, len(ss))
	for i, s := range ss {
		if (s.Op == SFold || s.Op == SSet) && s.Var == from {
			out[i] = fn(s)
			continue
		}
		c := *s
		c.Body = retarget(s.Body, from, fn)
		out[i] = &c
	}
	return out
}

// factors flattens a product tree, left to right.
func factors(e Expr) []Expr {
	if e.Op != OpMul {
		return []Expr{e}
	}
	return append(factors(e.Args[0]), factors(e.Args[1])...)
}

// foldInto is fold s aimed at t: its value converted to t's kind (a
// widening to the old kind dropped) and, when fused, an FMA.
func foldInto(s *Stmt, t *Var, fused bool) *Stmt {
	if s.Op == SSet { // already fused by a lane; only the target moves
		return &Stmt{Op: SSet, Var: t, Value: subst(s.Value, s.Var, t.Get())}
	}
	v := s.Value
	if v.Kind != t.Kind {
		if v.Op == OpCvt && v.Args[0].Kind == t.Kind {
			v = v.Args[0]
		} else {
			v = v.Cvt(t.Kind)
		}
	}
	if fused && v.Op == OpMul {
		f := factors(v)
		rest := f[1]
		for _, x := range f[2:] {
			rest = rest.Mul(x)
		}
		return &Stmt{Op: SSet, Var: t, Value: f[0].FMA(rest, t.Get())}
	}
	return &Stmt{Op: SFold, Var: t, Value: v}
}

func contains(s *Stmt, loop string) bool {
	if s.Op == SFor && s.Var.Name == loop {
		return true
	}
	for _, b := range s.Body {
		if contains(b, loop) {
			return true
		}
	}
	return false
}

func (o *orderer) lanes(ss []*Stmt, a *Var, ord Order) []*Stmt {
	n := ord.Lanes
	if ord.Tree == TreeHalving && bits.OnesCount(uint(n)) != 1 {
		o.fail("order of %s: a halving tree of %d lanes", a.Name, n)
		return ss
	}
	lk := ord.LaneKind
	if lk == 0 {
		lk = a.Kind
	}
	ps := make([]*Var, n)
	var decl []*Stmt
	for c := range ps {
		ps[c] = o.newVar(fmt.Sprintf("%s%d", a.Name, c), lk, RoleAcc)
		decl = append(decl, &Stmt{Op: SAcc, Var: ps[c], Value: Const(lk, 0)})
	}
	var comb []*Stmt
	if ord.Tree == TreeHalving {
		for h := n / 2; h >= 1; h /= 2 {
			for i := 0; i < h; i++ {
				comb = append(comb, &Stmt{Op: SFold, Var: ps[i], Value: ps[i+h].Get()})
			}
		}
		comb = append(comb, &Stmt{Op: SFold, Var: a, Value: ps[0].Get().Cvt(a.Kind)})
	} else {
		for _, p := range ps {
			comb = append(comb, &Stmt{Op: SFold, Var: a, Value: p.Get().Cvt(a.Kind)})
		}
	}
	ia := indexOfAcc(ss, a)
	out := append(append([]*Stmt{}, ss[:ia+1]...), decl...)
	found := false
	for _, s := range ss[ia+1:] {
		switch {
		case s.Op == SFor && s.Var.Name == ord.LaneLoop:
			main, tail := o.laneLoop(s, a, ps, ord.LaneFused)
			out = append(append(append(out, main...), comb...), tail...)
			found = true
		case contains(s, ord.LaneLoop):
			out = append(append(out, o.nested(s, a, ps, ord)), comb...)
			found = true
		default:
			out = append(out, s)
		}
	}
	if !found {
		o.fail("order of %s: no lane loop %s in its scope", a.Name, ord.LaneLoop)
	}
	return out
}

// nested lowers the lane loops inside s, whose tails fold into a.
func (o *orderer) nested(s *Stmt, a *Var, ps []*Var, ord Order) *Stmt {
	c := *s
	c.Body = nil
	for _, b := range s.Body {
		if b.Op == SFor && b.Var.Name == ord.LaneLoop {
			main, tail := o.laneLoop(b, a, ps, ord.LaneFused)
			c.Body = append(append(c.Body, main...), tail...)
		} else {
			c.Body = append(c.Body, o.nested(b, a, ps, ord))
		}
	}
	return &c
}

// laneLoop is the lanes' main part of loop l (copy c of the body folding
// into ps[c]) and the tail loop left to fold into a.
func (o *orderer) laneLoop(l *Stmt, a *Var, ps []*Var, fused bool) (main, tail []*Stmt) {
	n := len(ps)
	if l.Step != 1 {
		o.fail("lanes over loop %s of step %d", l.Var.Name, l.Step)
		return []*Stmt{l}, nil
	}
	v := l.Var
	copyAt := func(c int, idx Expr) *Stmt {
		body := retarget(substStmts(l.Body, v, idx), a, func(s *Stmt) *Stmt { return foldInto(s, ps[c], fused) })
		return &Stmt{Op: SBlock, Body: body}
	}
	mainHi := l.Lo.Add(l.Hi.Sub(l.Lo).Max(0).Div(n).Mul(n))
	if l.Lo.Op == OpConst && l.Hi.Op == OpConst && l.Hi.Int-l.Lo.Int == int64(n) {
		for c := 0; c < n; c++ {
			main = append(main, copyAt(c, I(int(l.Lo.Int)+c)))
		}
		return main, nil
	}
	nv := o.newVar(v.Name, Int, RoleLoop)
	loop := &Stmt{Op: SFor, Var: nv, Lo: l.Lo, Hi: mainHi, Step: n, Loop: l.Loop, fixed: true}
	for c := 0; c < n; c++ {
		loop.Body = append(loop.Body, copyAt(c, nv.Get().Add(c)))
	}
	main = []*Stmt{loop}
	if mainHi.Op != OpConst || l.Hi.Op != OpConst || mainHi.Int < l.Hi.Int {
		tail = []*Stmt{{Op: SFor, Var: v, Lo: mainHi, Hi: l.Hi, Step: 1, Loop: l.Loop, Body: l.Body}}
	}
	return main, tail
}

// retype gives a the Order's kind and fusion: a new accumulator takes its
// folds, and its reads (the result's too) widen back to a's kind.
func (o *orderer) retype(ss []*Stmt, a *Var, ord Order) []*Stmt {
	k := ord.Kind
	if k == 0 {
		k = a.Kind
	}
	t := a
	ia := indexOfAcc(ss, a)
	init := ss[ia].Value
	if k != a.Kind {
		t = o.newVar(a.Name, k, RoleAcc)
		if init.Op == OpConst {
			init = Const(k, init.Float)
		} else {
			init = init.Cvt(k)
		}
	}
	out := append([]*Stmt{}, ss[:ia]...)
	out = append(out, &Stmt{Op: SAcc, Var: t, Value: init})
	rest := retarget(ss[ia+1:], a, func(s *Stmt) *Stmt { return foldInto(s, t, ord.Fused) })
	if t != a {
		r := t.Get().Cvt(a.Kind)
		rest = substStmts(rest, a, r)
		o.result = subst(o.result, a, r)
	}
	return append(out, rest...)
}
