package kernel

import (
	"errors"
	"math"
)

// The scalar semantics shared by constant folding and the interpreter, so a
// folded constant is the value the op would have computed at run time.
// Integers live in an int64, wrapped to their kind after every op; f32 values
// live in a float64 that always holds an exact float32.

// wrap truncates v to kind k and extends it back, as a Go conversion does.
func wrap(k Kind, v int64) int64 {
	switch k {
	case Bool:
		if v != 0 {
			return 1
		}
		return 0
	case U8:
		return int64(uint8(v))
	case I8:
		return int64(int8(v))
	case U16:
		return int64(uint16(v))
	case U32:
		return int64(uint32(v))
	case I32:
		return int64(int32(v))
	}
	return v
}

var errDivZero = errors.New("integer divide by zero")

// intOp is a binary integer op of kind k on wrapped operands.
func intOp(op Op, k Kind, a, b int64) (int64, error) {
	var r int64
	switch op {
	case OpAdd:
		r = a + b
	case OpSub:
		r = a - b
	case OpMul:
		r = a * b
	case OpDiv, OpRem:
		if b == 0 {
			return 0, errDivZero
		}
		if op == OpDiv {
			r = a / b
		} else {
			r = a % b
		}
	case OpAnd:
		r = a & b
	case OpOr:
		r = a | b
	case OpXor:
		r = a ^ b
	case OpShl, OpShr:
		if b < 0 {
			return 0, errors.New("negative shift count")
		}
		if op == OpShl {
			r = a << uint64(b)
		} else {
			// operands are extended, so >> is logical for unsigned kinds
			r = a >> uint64(b)
		}
	case OpMin:
		r = min(a, b)
	case OpMax:
		r = max(a, b)
	case OpEq, OpNe, OpLt, OpLe, OpGt, OpGe:
		return b2i(cmp(op, a < b, a == b)), nil
	default:
		return 0, errors.New("bad integer op " + op.String())
	}
	return wrap(k, r), nil
}

func cmp(op Op, lt, eq bool) bool {
	switch op {
	case OpEq:
		return eq
	case OpNe:
		return !eq
	case OpLt:
		return lt
	case OpLe:
		return lt || eq
	case OpGt:
		return !lt && !eq
	}
	return !lt
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// f32Op and f64Op round every result to the kind; the explicit conversions
// also forbid the compiler from fusing into an FMA, as the Go emitter's do.
func f32Op(op Op, a, b, c float32) float32 {
	switch op {
	case OpAdd:
		return float32(a + b)
	case OpSub:
		return float32(a - b)
	case OpMul:
		return float32(a * b)
	case OpDiv:
		return float32(a / b)
	case OpMin:
		return min(a, b)
	case OpMax:
		return max(a, b)
	case OpPow:
		return float32(math.Pow(float64(a), float64(b)))
	case OpNeg:
		return -a
	case OpFMA:
		return float32(math.FMA(float64(a), float64(b), float64(c)))
	case OpExp:
		return float32(math.Exp(float64(a)))
	case OpLog:
		return float32(math.Log(float64(a)))
	case OpSqrt:
		return float32(math.Sqrt(float64(a)))
	case OpRsqrt:
		return float32(1 / float32(math.Sqrt(float64(a))))
	case OpSin:
		return float32(math.Sin(float64(a)))
	case OpCos:
		return float32(math.Cos(float64(a)))
	}
	panic("kernel: bad f32 op " + op.String())
}

func f64Op(op Op, a, b, c float64) float64 {
	switch op {
	case OpAdd:
		return float64(a + b)
	case OpSub:
		return float64(a - b)
	case OpMul:
		return float64(a * b)
	case OpDiv:
		return float64(a / b)
	case OpMin:
		return min(a, b)
	case OpMax:
		return max(a, b)
	case OpPow:
		return math.Pow(a, b)
	case OpNeg:
		return -a
	case OpFMA:
		return math.FMA(a, b, c)
	case OpExp:
		return math.Exp(a)
	case OpLog:
		return math.Log(a)
	case OpSqrt:
		return math.Sqrt(a)
	case OpRsqrt:
		return float64(1 / math.Sqrt(a))
	case OpSin:
		return math.Sin(a)
	case OpCos:
		return math.Cos(a)
	}
	panic("kernel: bad f64 op " + op.String())
}

// F16ToF32 converts IEEE half bits to float32 exactly (NaN payloads kept).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	e := uint32(113) // subnormal half: normalise into a float32 normal
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// fold evaluates integer ops on constants, and reassociates index sums
// (i+c1)+c2 into i+(c1+c2) and drops i+0, so unrolled offsets read plainly.
func fold(n *Node) (Expr, bool) {
	if len(n.Args) == 0 {
		return nil, false
	}
	if n.Op == OpAdd && n.Kind == Int && n.Args[1].Op == OpConst {
		a, c := n.Args[0], n.Args[1].Int
		if a.Op == OpAdd && a.Args[1].Op == OpConst {
			a, c = a.Args[0], c+a.Args[1].Int
		}
		if c == 0 {
			return a, true
		}
		if a != n.Args[0] {
			return &Node{Op: OpAdd, Kind: Int, Args: []Expr{a, I(int(c))}}, true
		}
	}
	for _, a := range n.Args {
		if a.Op != OpConst || !a.Kind.IsInt() {
			return nil, false
		}
	}
	switch {
	case n.Op == OpCvt && n.Kind.IsInt():
		return Const(n.Kind, wrap(n.Kind, n.Args[0].Int)), true
	case len(n.Args) == 2 && n.Op <= OpMax:
		r, err := intOp(n.Op, n.Args[0].Kind, n.Args[0].Int, n.Args[1].Int)
		if err != nil {
			return nil, false // left for run time, which reports it
		}
		if n.Kind == Bool {
			return Const(Bool, r != 0), true
		}
		return Const(n.Kind, r), true
	case len(n.Args) == 2 && n.Op >= OpEq && n.Op <= OpGe:
		r, _ := intOp(n.Op, n.Args[0].Kind, n.Args[0].Int, n.Args[1].Int)
		return Const(Bool, r != 0), true
	}
	return nil, false
}

// F32ToF16 rounds f to the nearest IEEE half, ties to even, and returns its
// bits: overflow gives ±inf, magnitudes below half the smallest subnormal
// give ±0, and a NaN keeps its sign and top payload bits with the quiet bit
// set. It is kernels/quant.F32ToF16 (ggml's conversion) bit for bit.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 112 // rebias 127 -> 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++
		}
		return sign | uint16(q)
	}
	q := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++
	}
	return sign | uint16(q)
}
