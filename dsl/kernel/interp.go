package kernel

import (
	"fmt"
	"math"
)

// Run interprets k, the reference semantics every target must match bit for
// bit. args follow k.Params: a []byte, []int8, []uint16, []uint32, []int32,
// []float32 or []float64 for each buffer, an int, int32, float32 or float64
// for each scalar. Split, Unroll and Lanes are ignored (they never change
// results); the Orders and Threads of k's default schedule, which do, are honoured. Run
// Apply(k, s) to interpret another scheduled form. Out-of-bounds accesses, integer
// division by zero and bad arguments are returned as errors.
func Run(k *Kernel, args ...any) (err error) { return run(k, nil, args...) }

// run interprets k, under the Orders of its default schedule (which, unlike
// Split and Unroll, decide its rounding), and sets *res to its Result.
func run(k *Kernel, res *val, args ...any) (err error) {
	if len(k.Phases) > 0 {
		per, err := PhaseArgs(k, args)
		if err != nil {
			return err
		}
		if _, ok := args[len(args)-1].([]uint32); k.Local == nil && !ok { // local phases have no barrier
			return fmt.Errorf("kernel %s: barrier given a %T (a []uint32)", k.Name, args[len(args)-1])
		}
		if k.Epilogue != nil { // the groups in order, each block's epilogue as its last group ends
			return runGroups(k, nil, args)
		}
		for i, p := range k.Phases {
			if err := run(p, nil, per[i]...); err != nil {
				return fmt.Errorf("kernel %s: %w", k.Name, err)
			}
		}
		return nil
	}
	k, m, err := prepare(k, args)
	if err != nil {
		return err
	}
	defer recoverRun(k, &err)
	m.stmts(k.Body)
	if res != nil && k.Result != nil {
		*res = m.eval(k.Result)
	}
	return nil
}

// prepare lowers k for the interpreter (its cooperative loops marked, its
// Orders lowered) and binds args on a new machine.
func prepare(k *Kernel, args []any) (*Kernel, *machine, error) {
	var err error
	if hasThreads(k.Schedule) {
		// cooperative loops are marked by Apply (which lowers the Orders too)
		if k, err = Apply(k, Schedule{}); err != nil {
			return nil, nil, err
		}
	} else if hasOrders(k.Schedule) {
		if k, err = lowerOrders(k, k.Schedule); err != nil {
			return nil, nil, err
		}
	}
	if len(args) != len(k.Params) {
		return nil, nil, fmt.Errorf("kernel %s: %d arguments for %d parameters", k.Name, len(args), len(k.Params))
	}
	m := &machine{vars: make([]val, k.NVars), bufs: make([]bufv, k.NBufs)}
	for i, p := range k.Params {
		if err := m.bind(p, args[i]); err != nil {
			return nil, nil, fmt.Errorf("kernel %s: %v", k.Name, err)
		}
	}
	return k, m, nil
}

type runError string

// recoverRun turns a failure of interpreting k (a runError panic) into
// *err; other panics go on.
func recoverRun(k *Kernel, err *error) {
	if r := recover(); r != nil {
		re, ok := r.(runError)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("kernel %s: %s", k.Name, string(re))
	}
}

func fail(format string, args ...any) { panic(runError(fmt.Sprintf(format, args...))) }

// val holds an integer or bool (wrapped to its kind) or a float (an f32
// value is an exact float32 held in f).
type val struct {
	i int64
	f float64
}

// bufv is a buffer or window: elements [off, off+n) of root.
type bufv struct {
	root   any
	off, n int
}

type machine struct {
	vars  []val
	bufs  []bufv
	accs  map[*Stmt][]*Var // a cooperative loop's split accumulators
	tiles map[*Tile][]float32
	// the stages in force (kernel.Stage), by root buffer
	staged map[*Buf]stageRange
}

func (m *machine) bind(p Param, a any) error {
	if p.Var != nil {
		var v val
		k, ok := p.Var.Kind, false
		switch x := a.(type) {
		case int:
			v.i, ok = wrap(k, int64(x)), k.IsInt()
		case int32:
			v.i, ok = wrap(k, int64(x)), k.IsInt()
		case float32:
			v.f, ok = float64(x), k == F32
		case float64:
			v.f, ok = x, k == F64
		}
		if !ok {
			return fmt.Errorf("scalar %s (%s): argument of type %T", p.Var.Name, k, a)
		}
		m.vars[p.Var.ID] = v
		return nil
	}
	n := -1
	switch x := a.(type) {
	case []byte:
		n = ifKind(p.Buf.Elem == U8, len(x))
	case []int8:
		n = ifKind(p.Buf.Elem == I8, len(x))
	case []uint16:
		n = ifKind(p.Buf.Elem == U16, len(x))
	case []uint32:
		n = ifKind(p.Buf.Elem == U32, len(x))
	case []int32:
		n = ifKind(p.Buf.Elem == I32, len(x))
	case []float32:
		n = ifKind(p.Buf.Elem == F32, len(x))
	case []float64:
		n = ifKind(p.Buf.Elem == F64, len(x))
	}
	if n < 0 {
		return fmt.Errorf("buffer %s (%s): argument of type %T", p.Buf.Name, p.Buf.Elem, a)
	}
	m.bufs[p.Buf.ID] = bufv{root: a, n: n}
	return nil
}

func ifKind(ok bool, n int) int {
	if ok {
		return n
	}
	return -1
}

func (m *machine) stmts(ss []*Stmt) {
	for _, s := range ss {
		m.stmt(s)
	}
	if len(m.staged) == 0 { // most lists: nothing staged to end
		return
	}
	for _, s := range ss { // a stage lasts to the end of its list
		if s.Op == SStage {
			m.unstage(s.Buf)
		}
	}
}

func (m *machine) stmt(s *Stmt) {
	switch s.Op {
	case SLet, SAcc, SSet:
		m.vars[s.Var.ID] = m.eval(s.Value)
	case SFold:
		v := &m.vars[s.Var.ID]
		*v = m.arith(s.Var.Fold, s.Var.Kind, *v, m.eval(s.Value), val{})
	case SStore:
		m.store(s.Buf, int(m.eval(s.Index).i), m.eval(s.Value))
	case SView:
		p := m.bufs[s.Buf.Parent.ID]
		base := int(m.eval(s.Index).i)
		if base < 0 || base+s.Buf.Size > p.n {
			fail("view %s [%d:%d] outside %s (%d)", s.Buf.Name, base, base+s.Buf.Size, s.Buf.Parent.Name, p.n)
		}
		m.bufs[s.Buf.ID] = bufv{root: p.root, off: p.off + base, n: s.Buf.Size}
	case SFor:
		if s.Threads > 1 {
			m.threadLoop(s)
			return
		}
		lo, hi := m.eval(s.Lo).i, m.eval(s.Hi).i
		for i := lo; i < hi; i += int64(s.Step) {
			m.vars[s.Var.ID] = val{i: i}
			m.stmts(s.Body)
		}
	case SBlock:
		m.stmts(s.Body)
	case SBarrier:
		// serial execution already orders every access
	case STile, STileMMA, STileStore:
		m.tile(s)
	case SBlockMatMul:
		m.blockMatMul(s)
	case SBlockAttention:
		m.blockAttention(s)
	case SPrefetch:
		m.prefetch(s)
	case SStage:
		m.stage(s)
	default:
		fail("statement %d", s.Op)
	}
}

func (m *machine) at(b *Buf, i, width int) int {
	bv := m.bufs[b.ID]
	if i < 0 || i+width > bv.n {
		fail("%s[%d] out of range [0:%d]", b.Name, i, bv.n)
	}
	return bv.off + i
}

func (m *machine) load(b *Buf, k Kind, i int) val {
	if k != b.Elem { // little-endian load from a byte buffer
		w := k.Bytes()
		j := m.at(b, i, w)
		if len(m.staged) > 0 {
			m.checkStaged(b, j, w, false)
		}
		src := m.bufs[b.ID].root.([]byte)
		var u uint64
		for x := w - 1; x >= 0; x-- {
			u = u<<8 | uint64(src[j+x])
		}
		return val{i: int64(u)}
	}
	j := m.at(b, i, 1)
	if len(m.staged) > 0 {
		m.checkStaged(b, j, 1, false)
	}
	switch x := m.bufs[b.ID].root.(type) {
	case []byte:
		return val{i: int64(x[j])}
	case []int8:
		return val{i: int64(x[j])}
	case []uint16:
		return val{i: int64(x[j])}
	case []uint32:
		return val{i: int64(x[j])}
	case []int32:
		return val{i: int64(x[j])}
	case []float32:
		return val{f: float64(x[j])}
	case []float64:
		return val{f: x[j]}
	}
	panic("unreachable")
}

func (m *machine) store(b *Buf, i int, v val) {
	j := m.at(b, i, 1)
	if len(m.staged) > 0 {
		m.checkStaged(b, j, 1, true)
	}
	switch x := m.bufs[b.ID].root.(type) {
	case []byte:
		x[j] = byte(v.i)
	case []int8:
		x[j] = int8(v.i)
	case []uint16:
		x[j] = uint16(v.i)
	case []uint32:
		x[j] = uint32(v.i)
	case []int32:
		x[j] = int32(v.i)
	case []float32:
		x[j] = float32(v.f)
	case []float64:
		x[j] = v.f
	}
}

func (m *machine) eval(e Expr) val {
	switch e.Op {
	case OpConst:
		return val{i: e.Int, f: e.Float}
	case OpVar:
		return m.vars[e.Var.ID]
	case OpLen:
		return val{i: int64(m.bufs[e.Buf.ID].n)}
	case OpLoad:
		i := int(m.eval(e.Args[0]).i)
		if e.Aligned {
			if j := (m.bufs[e.Buf.ID].off + i) * e.Buf.Elem.Bytes(); j%e.Kind.Bytes() != 0 {
				fail("%s: %s load at byte %d of its buffer, not aligned", e.Buf.Name, e.Kind, j)
			}
		}
		return m.load(e.Buf, e.Kind, i)
	case OpSelect:
		c, a, b := m.eval(e.Args[0]), m.eval(e.Args[1]), m.eval(e.Args[2])
		if c.i != 0 {
			return a
		}
		return b
	case OpCvt:
		return convert(e.Args[0].Kind, e.Kind, m.eval(e.Args[0]))
	case OpF16ToF32:
		return val{f: float64(F16ToF32(uint16(m.eval(e.Args[0]).i)))}
	case OpF32FromBits:
		return f32FromBits(m.eval(e.Args[0]))
	case OpF32Bits:
		return f32Bits(m.eval(e.Args[0]))
	case OpF32ToF16:
		return val{i: int64(F32ToF16(float32(m.eval(e.Args[0]).f)))}
	case OpDot4:
		return val{i: dot4(m.eval(e.Args[0]).i, m.eval(e.Args[1]).i, m.eval(e.Args[2]).i)}
	}
	var a, b, c val
	a = m.eval(e.Args[0])
	if len(e.Args) > 1 {
		b = m.eval(e.Args[1])
	}
	if len(e.Args) > 2 {
		c = m.eval(e.Args[2])
	}
	return m.arith(e.Op, e.Args[0].Kind, a, b, c)
}

// arith applies op to operands of kind k.
func (m *machine) arith(op Op, k Kind, a, b, c val) val {
	if op >= OpEq && op <= OpGe && k.IsFloat() {
		x, y := a.f, b.f // exact for f32 too
		var r bool
		switch op {
		case OpEq:
			r = x == y
		case OpNe:
			r = x != y
		case OpLt:
			r = x < y
		case OpLe:
			r = x <= y
		case OpGt:
			r = x > y
		case OpGe:
			r = x >= y
		}
		return val{i: b2i(r)}
	}
	switch k {
	case F32:
		return val{f: float64(f32Op(op, float32(a.f), float32(b.f), float32(c.f)))}
	case F64:
		return val{f: f64Op(op, a.f, b.f, c.f)}
	}
	if op == OpNeg {
		return val{i: wrap(k, -a.i)}
	}
	r, err := intOp(op, k, a.i, b.i)
	if err != nil {
		fail("%s: %v", op, err)
	}
	return val{i: r}
}

// convert is Go's conversion from kind f to kind t.
func convert(f, t Kind, v val) val {
	switch {
	case f.IsInt() && t.IsInt():
		return val{i: wrap(t, v.i)}
	case f.IsInt() && t == F32:
		return val{f: float64(float32(v.i))}
	case f.IsInt() && t == F64:
		return val{f: float64(v.i)}
	case f == F32 && t == F64, f == F64 && t == F64:
		return v
	case f == F64 && t == F32:
		return val{f: float64(float32(v.f))}
	case f == F32:
		return val{i: f2i(float32(v.f), t)}
	case f == F64:
		return val{i: f2i(v.f, t)}
	}
	fail("cvt %s to %s", f, t)
	return val{}
}

// f2i converts as the Go emitter's T(x) does (out-of-range values are
// implementation-defined in Go; the same machine gives the same answer).
func f2i[T float32 | float64](x T, t Kind) int64 {
	if math.IsNaN(float64(x)) {
		fail("cvt of NaN to %s", t)
	}
	switch t {
	case U8:
		return int64(uint8(x))
	case I8:
		return int64(int8(x))
	case U16:
		return int64(uint16(x))
	case U32:
		return int64(uint32(x))
	case I32:
		return int64(int32(x))
	}
	return int64(int(x))
}
