package kernel

import (
	"errors"
	"math"

	"github.com/jitllm/jitllm/kernels/quant"
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
		return quant.FMA32(a, b, c) // rounded once, as the hardware does
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

// F16ToF32 converts IEEE half bits to float32 exactly (NaN payloads kept);
// the IR's conversions are kernels/quant's, the one implementation of ggml's.
func F16ToF32(h uint16) float32 { return quant.F16ToF32(h) }

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
// set (kernels/quant.F32ToF16, ggml's conversion).
func F32ToF16(f float32) uint16 { return quant.F32ToF16(f) }
