package kernel

import "fmt"

// Op is an expression operator.
type Op uint8

const (
	OpConst Op = iota // Int (integers, bools) or Float
	OpVar             // a scalar parameter, loop index, Let or accumulator
	OpLen             // elements in Buf
	OpLoad            // Buf[Args[0]]; a wider Kind on a U8 buffer reads little-endian bytes at that byte offset

	// binary, operands of one kind (shifts: any integer count)
	OpAdd
	OpSub
	OpMul
	OpDiv // integers truncate toward zero, as Go
	OpRem
	OpAnd
	OpOr
	OpXor
	OpShl
	OpShr // arithmetic on signed kinds
	OpMin
	OpMax
	OpPow // floats only

	// comparisons give Bool
	OpEq
	OpNe
	OpLt
	OpLe
	OpGt
	OpGe

	OpNeg
	OpFMA      // a*b+c rounded once in f64, then to the kind (Go has no f32 fma)
	OpSelect   // Args[0] ? Args[1] : Args[2]; both arms are evaluated
	OpCvt      // Go conversion to Kind
	OpF16ToF32 // U16 bits of an IEEE half to F32, exactly
	OpExp
	OpLog
	OpSqrt
	OpRsqrt // 1/sqrt(x), each step rounded to the kind
	OpSin
	OpCos
	OpF32FromBits // U32 bits of an IEEE single to F32 (an f32 stored in a byte buffer)
	OpF32ToF16    // F32 to the U16 bits of the nearest IEEE half (ties to even; NaN keeps sign and top payload bits)
	OpDot4        // I32: Σ_i ubyte_i(Args[0]) · sbyte_i(Args[1]) + Args[2], wrapping (a GPU's dp4a)
	OpF32Bits     // F32 to the U32 bits of its IEEE single (OpF32FromBits's inverse)
)

var opNames = [...]string{"const", "var", "len", "load", "add", "sub", "mul", "div", "rem", "and", "or", "xor",
	"shl", "shr", "min", "max", "pow", "eq", "ne", "lt", "le", "gt", "ge", "neg", "fma", "select", "cvt",
	"f16tof32", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "f32frombits", "f32tof16", "dot4", "f32bits"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// Node is one expression. Expressions are immutable trees built without a
// builder; a malformed one carries Err, which the statement using it reports.
type Node struct {
	Op    Op
	Kind  Kind
	Args  []Expr
	Int   int64   // OpConst of an integer or Bool kind
	Float float64 // OpConst of a float kind
	Var   *Var    // OpVar
	Buf   *Buf    // OpLen, OpLoad
	// Aligned (OpLoad) promises that the load's byte offset in its root
	// buffer is a multiple of its size (Buf.Aligned).
	Aligned bool
	// AnyNaN (OpF16ToF32) lets a target return any NaN for a NaN half
	// (F16ToF32AnyNaN): every other value is the exact widening.
	AnyNaN bool
	Err    error
}

// Expr is a handle to an expression.
type Expr = *Node

// Const is a constant of kind k: x is an int, float64, float32 or bool.
func Const(k Kind, x any) Expr {
	n := &Node{Op: OpConst, Kind: k}
	switch v := x.(type) {
	case int:
		n.Int, n.Float = int64(v), float64(v)
	case int64:
		n.Int, n.Float = v, float64(v)
	case float64:
		n.Float = v
		if !k.IsFloat() {
			return bad("constant %v is not a %s", v, k)
		}
	case float32:
		n.Float = float64(v)
		if !k.IsFloat() {
			return bad("constant %v is not a %s", v, k)
		}
	case bool:
		if k != Bool {
			return bad("constant %v is not a %s", v, k)
		}
		if v {
			n.Int = 1
		}
	default:
		return bad("constant of type %T", x)
	}
	if k.IsInt() {
		n.Int = wrap(k, n.Int)
	}
	if k == F32 {
		n.Float = float64(float32(n.Float))
	}
	return n
}

// I, F and D are constants of the index kind, F32 and F64.
func I(v int) Expr     { return Const(Int, v) }
func F(v float64) Expr { return Const(F32, v) }
func D(v float64) Expr { return Const(F64, v) }

func bad(format string, args ...any) Expr {
	return &Node{Op: OpConst, Err: fmt.Errorf("kernel: "+format, args...)}
}

// lit turns a Go number into a constant of kind k; an Expr passes through.
func lit(k Kind, x any) Expr {
	if e, ok := x.(Expr); ok {
		return e
	}
	return Const(k, x)
}

func firstErr(args ...Expr) error {
	for _, a := range args {
		if a == nil {
			return fmt.Errorf("kernel: nil expression")
		}
		if a.Err != nil {
			return a.Err
		}
	}
	return nil
}

// mk builds a node after checking its arguments' errors and folding integer
// constants (so unrolled offsets render as literals).
func mk(op Op, k Kind, args ...Expr) Expr {
	if err := firstErr(args...); err != nil {
		return &Node{Op: op, Kind: k, Err: err}
	}
	n := &Node{Op: op, Kind: k, Args: args}
	if f, ok := fold(n); ok {
		return f
	}
	return n
}

func (a *Node) binary(op Op, bx any) Expr {
	b := lit(a.Kind, bx)
	if err := firstErr(a, b); err != nil {
		return &Node{Op: op, Err: err}
	}
	k := a.Kind
	switch {
	case op == OpShl || op == OpShr:
		if !k.IsInt() || !b.Kind.IsInt() {
			return bad("%s of %s by %s", op, k, b.Kind)
		}
		return mk(op, k, a, b)
	case a.Kind != b.Kind:
		return bad("%s of %s and %s", op, a.Kind, b.Kind)
	case (op == OpAnd || op == OpOr || op == OpXor || op == OpRem) && !k.IsInt():
		return bad("%s of %s", op, k)
	case op == OpPow && !k.IsFloat():
		return bad("pow of %s", k)
	case k == Bool && op < OpEq:
		return bad("%s of bool", op)
	}
	if op >= OpEq && op <= OpGe {
		return mk(op, Bool, a, b)
	}
	return mk(op, k, a, b)
}

// Arithmetic, bitwise and comparison methods. The operand may be an Expr of
// the receiver's kind or a Go number, which becomes a constant of that kind.
func (a *Node) Add(b any) Expr { return a.binary(OpAdd, b) }
func (a *Node) Sub(b any) Expr { return a.binary(OpSub, b) }
func (a *Node) Mul(b any) Expr { return a.binary(OpMul, b) }
func (a *Node) Div(b any) Expr { return a.binary(OpDiv, b) }
func (a *Node) Rem(b any) Expr { return a.binary(OpRem, b) }
func (a *Node) And(b any) Expr { return a.binary(OpAnd, b) }
func (a *Node) Or(b any) Expr  { return a.binary(OpOr, b) }
func (a *Node) Xor(b any) Expr { return a.binary(OpXor, b) }
func (a *Node) Min(b any) Expr { return a.binary(OpMin, b) }
func (a *Node) Max(b any) Expr { return a.binary(OpMax, b) }
func (a *Node) Pow(b any) Expr { return a.binary(OpPow, b) }
func (a *Node) Eq(b any) Expr  { return a.binary(OpEq, b) }
func (a *Node) Ne(b any) Expr  { return a.binary(OpNe, b) }
func (a *Node) Lt(b any) Expr  { return a.binary(OpLt, b) }
func (a *Node) Le(b any) Expr  { return a.binary(OpLe, b) }
func (a *Node) Gt(b any) Expr  { return a.binary(OpGt, b) }
func (a *Node) Ge(b any) Expr  { return a.binary(OpGe, b) }

// Shl and Shr shift by a count of any integer kind (a Go number is an Int).
func (a *Node) Shl(s any) Expr { return a.binary(OpShl, lit(Int, s)) }
func (a *Node) Shr(s any) Expr { return a.binary(OpShr, lit(Int, s)) }

func (a *Node) unary(op Op, float bool) Expr {
	if err := firstErr(a); err != nil {
		return &Node{Op: op, Err: err}
	}
	if float && !a.Kind.IsFloat() || !float && !a.Kind.IsInt() && !a.Kind.IsFloat() {
		return bad("%s of %s", op, a.Kind)
	}
	return mk(op, a.Kind, a)
}

func (a *Node) Neg() Expr   { return a.unary(OpNeg, false) }
func (a *Node) Exp() Expr   { return a.unary(OpExp, true) }
func (a *Node) Log() Expr   { return a.unary(OpLog, true) }
func (a *Node) Sqrt() Expr  { return a.unary(OpSqrt, true) }
func (a *Node) Rsqrt() Expr { return a.unary(OpRsqrt, true) }
func (a *Node) Sin() Expr   { return a.unary(OpSin, true) }
func (a *Node) Cos() Expr   { return a.unary(OpCos, true) }

// FMA is a*b + c.
func (a *Node) FMA(b, c any) Expr {
	bb, cc := lit(a.Kind, b), lit(a.Kind, c)
	if err := firstErr(a, bb, cc); err != nil {
		return &Node{Op: OpFMA, Err: err}
	}
	if !a.Kind.IsFloat() || bb.Kind != a.Kind || cc.Kind != a.Kind {
		return bad("fma of %s, %s, %s", a.Kind, bb.Kind, cc.Kind)
	}
	return mk(OpFMA, a.Kind, a, bb, cc)
}

// Cvt converts to kind k with Go's conversion rules.
func (a *Node) Cvt(k Kind) Expr {
	if err := firstErr(a); err != nil {
		return &Node{Op: OpCvt, Err: err}
	}
	if k == Bool || a.Kind == Bool || k == Invalid {
		return bad("cvt %s to %s", a.Kind, k)
	}
	if a.Kind == k {
		return a
	}
	return mk(OpCvt, k, a)
}

// F16ToF32 reads the receiver's U16 bits as an IEEE half.
func (a *Node) F16ToF32() Expr {
	if err := firstErr(a); err != nil {
		return &Node{Op: OpF16ToF32, Err: err}
	}
	if a.Kind != U16 {
		return bad("f16tof32 of %s", a.Kind)
	}
	return mk(OpF16ToF32, F32, a)
}

// F16ToF32AnyNaN is F16ToF32 where a NaN may come out as any NaN (the
// interpreter keeps its payload; a GPU's conversion instruction alone does
// not): for inner loops over halves that only a model gone to NaN fills
// with NaNs, such as attention's KV cache, where the payload-preserving
// form costs ten instructions a value.
func (a *Node) F16ToF32AnyNaN() Expr {
	e := a.F16ToF32()
	if e.Err == nil {
		e.AnyNaN = true
	}
	return e
}

// F32ToF16 rounds the receiver (F32) to the nearest IEEE half, ties to
// even, and gives its U16 bits: overflow becomes ±inf, values below half
// the smallest subnormal ±0, and a NaN keeps its sign and the top ten
// payload bits with the quiet bit set (kernel.F32ToF16, ggml's conversion).
func (a *Node) F32ToF16() Expr {
	if err := firstErr(a); err != nil {
		return &Node{Op: OpF32ToF16, Err: err}
	}
	if a.Kind != F32 {
		return bad("f32tof16 of %s", a.Kind)
	}
	return mk(OpF32ToF16, U16, a)
}

// Dot4 is the dot product of the four unsigned bytes of a (U32) with the
// four signed bytes of b (U32), plus c (I32), wrapping to I32: four
// products of a quantized weight and a quantized activation in one
// instruction where the target has one (PTX dp4a.u32.s32).
func Dot4(a, b, c Expr) Expr {
	if err := firstErr(a, b, c); err != nil {
		return &Node{Op: OpDot4, Err: err}
	}
	if a.Kind != U32 || b.Kind != U32 || c.Kind != I32 {
		return bad("dot4 of %s, %s, %s (want U32, U32, I32)", a.Kind, b.Kind, c.Kind)
	}
	return mk(OpDot4, I32, a, b, c)
}

// dot4 is Dot4's value.
func dot4(a, b, c int64) int64 {
	s := int32(c)
	for i := 0; i < 4; i++ {
		s += int32(uint8(a>>(8*i))) * int32(int8(b>>(8*i)))
	}
	return int64(s)
}

// Select is c ? a : b. Both arms are evaluated, so both must be safe.
func Select(c Expr, a Expr, bx any) Expr {
	if err := firstErr(c, a); err != nil {
		return &Node{Op: OpSelect, Err: err}
	}
	b := lit(a.Kind, bx)
	if err := firstErr(b); err != nil {
		return &Node{Op: OpSelect, Err: err}
	}
	if c.Kind != Bool || a.Kind != b.Kind {
		return bad("select on %s of %s and %s", c.Kind, a.Kind, b.Kind)
	}
	return mk(OpSelect, a.Kind, c, a, b)
}
