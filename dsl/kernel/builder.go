package kernel

import "fmt"

// Role says what a Var is.
type Role uint8

const (
	RoleParam Role = iota // scalar parameter
	RoleLoop              // loop index (Int)
	RoleLet               // immutable local
	RoleAcc               // reduction accumulator
)

// Var is a named scalar. ID is unique within its kernel; renderers key their
// storage by it. Names need not be unique (Go loops in the metalanguage
// repeat them); renderers make their own identifiers.
type Var struct {
	Name string
	Kind Kind
	Role Role
	ID   int
	Fold Op // RoleAcc: OpAdd, OpMax or OpMin

	par int // ParallelFor depth at declaration
}

// Get reads the variable.
func (v *Var) Get() Expr { return &Node{Op: OpVar, Kind: v.Kind, Var: v} }

// Buf is a buffer parameter or a fixed-size window (View) of one. A U8
// buffer is byte-addressed: its loads of wider kinds read little-endian
// bytes at a byte offset, which is how quant blocks are decoded.
type Buf struct {
	Name   string
	Elem   Kind
	ID     int
	Parent *Buf // nil for a parameter
	Size   int  // elements in a View (a constant, so targets can check bounds once)
	// Settled marks a parameter no kernel launched beside this one writes
	// (a runtime's step buffer, which the host uploads between steps): a
	// target may load it before waiting for the kernel before (Settle)
	Settled bool
}

// Settle marks parameter b Settled and returns it.
func (b *Buf) Settle() *Buf {
	b.Settled = true
	return b
}

// Len is the element count.
func (b *Buf) Len() Expr { return &Node{Op: OpLen, Kind: Int, Buf: b} }

// At loads element i.
func (b *Buf) At(i any) Expr { return b.load(b.Elem, i) }

// U8, I8, U16, U32 and F16 load from a byte buffer at byte offset off; F16
// widens the half to F32.
func (b *Buf) U8(off any) Expr  { return b.load(U8, off) }
func (b *Buf) I8(off any) Expr  { return b.load(U8, off).Cvt(I8) }
func (b *Buf) U16(off any) Expr { return b.load(U16, off) }
func (b *Buf) U32(off any) Expr { return b.load(U32, off) }
func (b *Buf) F16(off any) Expr { return b.load(U16, off).F16ToF32() }

func (b *Buf) load(k Kind, ix any) Expr {
	i := lit(Int, ix)
	if err := firstErr(i); err != nil {
		return &Node{Op: OpLoad, Err: err}
	}
	switch {
	case i.Kind != Int:
		return bad("%s: index of kind %s", b.Name, i.Kind)
	case k != b.Elem && (b.Elem != U8 || (k != U16 && k != U32)):
		return bad("%s: %s load from a %s buffer", b.Name, k, b.Elem)
	case b.Size > 0 && i.Op == OpConst && (i.Int < 0 || i.Int+int64(k.Bytes()/b.Elem.Bytes()) > int64(b.Size)):
		return bad("%s: constant offset %d outside its %d elements", b.Name, i.Int, b.Size)
	}
	return &Node{Op: OpLoad, Kind: k, Buf: b, Args: []Expr{i}}
}

// StmtOp is a statement operator.
type StmtOp uint8

const (
	SLet            StmtOp = iota // Var := Value
	SAcc                          // declare accumulator Var = Value
	SFold                         // Var = Var <Var.Fold> Value
	SStore                        // Buf[Index] = Value
	SView                         // Buf is Buf.Parent[Index : Index+Buf.Size]
	SFor                          // for Var := Lo; Var < Hi; Var += Step { Body }
	SBlock                        // Body in its own scope (what unrolling makes)
	SBarrier                      // work-group barrier; serial targets need nothing
	SSet                          // Var = Value: an accumulator update a schedule wrote out (a fused multiply-add)
	STile                         // declare Tile, all zero (tile.go)
	STileMMA                      // Tile += Buf's rows times Buf2's rows, Args their offsets, strides and row counts
	STileStore                    // Buf[…] = Tile within Args' bounds
	SBlockMatMul                  // Out[…] = Buf's rows times Buf2's rows, a CTA's product (block.go)
	SBlockAttention               // Out[…] = attention of Buf's rows over Buf2's keys and Buf3's values (attention.go)
	SPrefetch                     // Buf[Index : Index+Hi] will be read soon (prefetch.go): no effect on results
	SStage                        // Buf[Index : Index+Hi] is all the rest of the body reads of Buf, in a stage of Step elements (stage.go)
)

// LoopKind says whether a loop's iterations may run at once.
type LoopKind uint8

const (
	Serial   LoopKind = iota
	Parallel          // iterations independent: no folds into outer accumulators
)

// Stmt is one statement.
type Stmt struct {
	Op    StmtOp
	Var   *Var
	Value Expr
	Buf   *Buf
	Index Expr
	Lo    Expr
	Hi    Expr
	Step  int
	Loop  LoopKind
	Body  []*Stmt
	// Threads > 1 (set by Apply from a loop's schedule) splits the loop over
	// that many cooperating threads (threads.go): thread t runs iterations
	// lo+t·step, lo+(t+Threads)·step, …, folding the accumulators declared
	// outside it into its own partials, which combine by a fixed tree after
	// the loop. It changes results, so the interpreter honours it.
	Threads int
	// Unroll > 1 on a cooperative loop (from its schedule's Unroll) asks a
	// target to run that many of a thread's iterations per trip, so their
	// loads are in flight together; each thread still folds its iterations
	// in order, so results do not change and the interpreter ignores it.
	Unroll int

	// the tile statements' operands (tile.go)
	Tile *Tile
	Buf2 *Buf
	Args []Expr
	// the block statements' shapes, third operand and output (block.go,
	// attention.go)
	Block *BlockShape
	Attn  *AttnShape
	Part  bool // a block attention over a range of positions, its output partial (BlockAttentionPart)
	Buf3  *Buf
	Out   *Buf
	Extra []*Buf // further outputs (a block attention's quants and scales)

	fixed bool // a loop an Order lowered (its step is its lane count): Split and Unroll leave it
}

// Param is one kernel parameter: a buffer or a scalar.
type Param struct {
	Buf *Buf
	Var *Var
}

// Kernel is a checked kernel: its signature, body and default schedule.
type Kernel struct {
	Name     string
	Params   []Param
	Body     []*Stmt
	Schedule Schedule
	Doc      string // one line for renderers' comments
	Result   Expr   // the kernel's return value (Return), evaluated after Body; nil for none
	// Phases, where set, are kernels run in turn in place of Body (Phases)
	Phases []*Kernel
	// Local, where set, makes the phases CTA-local (LocalPhases)
	Local *Local
	// Epilogue, where set, makes the second phase the first's block
	// epilogue (BlockEpilogue)
	Epilogue *Epilogue
	NVars    int
	NBufs    int
}

// Builder records one kernel. It holds all state, so kernels build
// concurrently; errors are collected and the first is returned by Build.
type Builder struct {
	k     *Kernel
	stack []*[]*Stmt
	par   int
	err   error
}

// New starts kernel name (a Go-style identifier, used by every target).
func New(name string) *Builder {
	k := &Kernel{Name: name, Schedule: Schedule{}}
	b := &Builder{k: k}
	b.stack = []*[]*Stmt{&k.Body}
	return b
}

// Doc sets the kernel's one-line description.
func (b *Builder) Doc(s string) { b.k.Doc = s }

func (b *Builder) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf("kernel %s: "+format, append([]any{b.k.Name}, args...)...)
	}
}

func (b *Builder) check(what string, es ...Expr) bool {
	if err := firstErr(es...); err != nil {
		b.fail("%s: %v", what, err)
		return false
	}
	return true
}

func (b *Builder) emit(s *Stmt) { top := b.stack[len(b.stack)-1]; *top = append(*top, s) }

func (b *Builder) newVar(name string, k Kind, r Role) *Var {
	v := &Var{Name: name, Kind: k, Role: r, ID: b.k.NVars, par: b.par}
	b.k.NVars++
	return v
}

func (b *Builder) newBuf(name string, elem Kind, parent *Buf, size int) *Buf {
	buf := &Buf{Name: name, Elem: elem, ID: b.k.NBufs, Parent: parent, Size: size}
	b.k.NBufs++
	return buf
}

// Buffer declares a buffer parameter of elem values (U8 for raw bytes).
func (b *Builder) Buffer(name string, elem Kind) *Buf {
	if len(b.stack) > 1 {
		b.fail("parameter %s declared inside a loop", name)
	}
	buf := b.newBuf(name, elem, nil, 0)
	b.k.Params = append(b.k.Params, Param{Buf: buf})
	return buf
}

// Scalar declares a scalar parameter (Int or F32 in practice).
func (b *Builder) Scalar(name string, k Kind) Expr {
	if len(b.stack) > 1 {
		b.fail("parameter %s declared inside a loop", name)
	}
	v := b.newVar(name, k, RoleParam)
	b.k.Params = append(b.k.Params, Param{Var: v})
	return v.Get()
}

// Let binds e to a new immutable local and returns a reference to it.
func (b *Builder) Let(name string, e Expr) Expr {
	if !b.check("let "+name, e) {
		return e
	}
	v := b.newVar(name, e.Kind, RoleLet)
	b.emit(&Stmt{Op: SLet, Var: v, Value: e})
	return v.Get()
}

// Acc declares an accumulator starting at init and folded with op (OpAdd,
// OpMax or OpMin); its kind, init's, is the declared accumulator type.
func (b *Builder) Acc(name string, op Op, init Expr) *Var {
	if op != OpAdd && op != OpMax && op != OpMin {
		b.fail("accumulator %s: fold %s", name, op)
	}
	b.check("acc "+name, init)
	k := Invalid
	if init != nil {
		k = init.Kind
	}
	v := b.newVar(name, k, RoleAcc)
	v.Fold = op
	b.emit(&Stmt{Op: SAcc, Var: v, Value: init})
	return v
}

// Fold combines e into acc. e must have the accumulator's kind: widening is
// the kernel's choice, so it is written out.
func (b *Builder) Fold(acc *Var, e Expr) {
	switch {
	case !b.check("fold "+acc.Name, e):
	case acc.Role != RoleAcc:
		b.fail("fold into %s, which is not an accumulator", acc.Name)
	case e.Kind != acc.Kind:
		b.fail("fold of %s into %s accumulator %s", e.Kind, acc.Kind, acc.Name)
	case acc.par != b.par:
		b.fail("fold into %s across a ParallelFor", acc.Name)
	default:
		b.emit(&Stmt{Op: SFold, Var: acc, Value: e})
	}
}

// Sum is the reduction Σ_{lo<=i<hi} f(i) into a new accumulator of kind k.
func (b *Builder) Sum(name string, k Kind, lo, hi any, f func(i Expr) Expr) Expr {
	acc := b.Acc(name, OpAdd, Const(k, 0))
	b.For(name+"_i", lo, hi, func(i Expr) { b.Fold(acc, f(i)) })
	return acc.Get()
}

// Store writes v to buf[i].
func (b *Builder) Store(buf *Buf, ix any, v Expr) {
	i := lit(Int, ix)
	switch {
	case !b.check("store "+buf.Name, i, v):
	case i.Kind != Int || v.Kind != buf.Elem:
		b.fail("store of %s at %s index into %s buffer %s", v.Kind, i.Kind, buf.Elem, buf.Name)
	default:
		b.emit(&Stmt{Op: SStore, Buf: buf, Index: i, Value: v})
	}
}

// View is the window parent[base : base+n] (elements; bytes for U8).
// Targets check its bounds once, so loads through it at constant offsets
// are free of checks.
func (b *Builder) View(name string, parent *Buf, base any, n int) *Buf {
	i := lit(Int, base)
	v := b.newBuf(name, parent.Elem, parent, n)
	switch {
	case !b.check("view "+name, i):
	case i.Kind != Int || n <= 0:
		b.fail("view %s: base of kind %s, size %d", name, i.Kind, n)
	default:
		b.emit(&Stmt{Op: SView, Buf: v, Index: i})
	}
	return v
}

// For is a serial loop over [lo, hi).
func (b *Builder) For(name string, lo, hi any, body func(i Expr)) {
	b.loop(name, Serial, lo, hi, body)
}

// ParallelFor is a loop whose iterations are independent (output rows).
func (b *Builder) ParallelFor(name string, lo, hi any, body func(i Expr)) {
	b.par++
	b.loop(name, Parallel, lo, hi, body)
	b.par--
}

func (b *Builder) loop(name string, kind LoopKind, lo, hi any, body func(i Expr)) {
	l, h := lit(Int, lo), lit(Int, hi)
	if !b.check("loop "+name, l, h) {
		return
	}
	if l.Kind != Int || h.Kind != Int {
		b.fail("loop %s: bounds of kind %s, %s", name, l.Kind, h.Kind)
		return
	}
	s := &Stmt{Op: SFor, Var: b.newVar(name, Int, RoleLoop), Lo: l, Hi: h, Step: 1, Loop: kind}
	b.emit(s)
	b.stack = append(b.stack, &s.Body)
	body(s.Var.Get())
	b.stack = b.stack[:len(b.stack)-1]
}

// Barrier orders memory among a GPU work-group; CPU targets run serially.
func (b *Builder) Barrier() { b.emit(&Stmt{Op: SBarrier}) }

// Schedule sets the default schedule of the loops named loop.
func (b *Builder) Schedule(loop string, s LoopSchedule) { b.k.Schedule[loop] = s }

// Build returns the kernel or the first error met.
func (b *Builder) Build() (*Kernel, error) {
	if b.err != nil {
		return nil, b.err
	}
	return b.k, nil
}

// MustBuild is Build for kernels fixed at compile time.
func (b *Builder) MustBuild() *Kernel {
	k, err := b.Build()
	if err != nil {
		panic(err)
	}
	return k
}
