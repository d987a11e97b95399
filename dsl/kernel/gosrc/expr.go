package gosrc

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
)

var goTypes = map[kernel.Kind]string{
	kernel.Bool: "bool", kernel.U8: "uint8", kernel.I8: "int8", kernel.U16: "uint16", kernel.U32: "uint32",
	kernel.I32: "int32", kernel.Int: "int", kernel.F32: "float32", kernel.F64: "float64",
}

var binOps = map[kernel.Op]string{
	kernel.OpAdd: "+", kernel.OpSub: "-", kernel.OpMul: "*", kernel.OpDiv: "/", kernel.OpRem: "%",
	kernel.OpAnd: "&", kernel.OpOr: "|", kernel.OpXor: "^", kernel.OpShl: "<<", kernel.OpShr: ">>",
	kernel.OpEq: "==", kernel.OpNe: "!=", kernel.OpLt: "<", kernel.OpLe: "<=", kernel.OpGt: ">", kernel.OpGe: ">=",
}

var mathFuncs = map[kernel.Op]string{
	kernel.OpExp: "Exp", kernel.OpLog: "Log", kernel.OpSqrt: "Sqrt", kernel.OpSin: "Sin", kernel.OpCos: "Cos",
	kernel.OpPow: "Pow", kernel.OpFMA: "FMA",
}

// constant renders c; bare leaves an integer or finite float untyped, for
// use beside a typed operand.
func constant(c kernel.Expr, bare bool) string {
	var s string
	switch {
	case c.Kind == kernel.Bool:
		return strconv.FormatBool(c.Int != 0)
	case c.Kind.IsInt():
		s = strconv.FormatInt(c.Int, 10)
		if c.Kind == kernel.Int || bare {
			return s
		}
	case math.IsInf(c.Float, 0) || math.IsNaN(c.Float):
		f := "math.NaN()"
		if !math.IsNaN(c.Float) {
			f = fmt.Sprintf("math.Inf(%d)", int(math.Copysign(1, c.Float)))
		}
		return goTypes[c.Kind] + "(" + f + ")"
	default:
		s = strconv.FormatFloat(c.Float, 'g', -1, c.Kind.Bytes()*8)
		if math.Signbit(c.Float) && c.Float == 0 {
			s = "math.Copysign(0, -1)"
		} else if bare {
			return s
		}
	}
	return goTypes[c.Kind] + "(" + s + ")"
}

// expr renders e as a Go expression of e's Go type.
func (f *fn) expr(e kernel.Expr) string {
	switch e.Op {
	case kernel.OpConst:
		return f.constant(e, false)
	case kernel.OpVar:
		return f.vars[e.Var]
	case kernel.OpLen:
		return "len(" + f.bufs[e.Buf] + ")"
	case kernel.OpLoad:
		return f.load(e)
	case kernel.OpSelect:
		f.helpers["sel"] = true
		return fmt.Sprintf("sel(%s, %s, %s)", f.bare(e.Args[0]), f.bare(e.Args[1]), f.bare(e.Args[2]))
	case kernel.OpCvt:
		return goTypes[e.Kind] + "(" + f.bare(e.Args[0]) + ")"
	case kernel.OpF16ToF32:
		f.helpers["f16tof32"] = true
		return "f16tof32(" + f.bare(e.Args[0]) + ")"
	case kernel.OpF32ToF16:
		f.helpers["f32tof16"] = true
		return "f32tof16(" + f.bare(e.Args[0]) + ")"
	case kernel.OpF32FromBits:
		f.imports["math"] = true
		return "math.Float32frombits(" + f.bare(e.Args[0]) + ")"
	case kernel.OpF32Bits:
		f.imports["math"] = true
		return "math.Float32bits(" + f.bare(e.Args[0]) + ")"
	case kernel.OpNeg:
		return "(-" + f.expr(e.Args[0]) + ")"
	case kernel.OpMin, kernel.OpMax:
		a, b := f.operands(e)
		return fmt.Sprintf("%s(%s, %s)", e.Op, a, b)
	case kernel.OpRsqrt:
		if e.Kind == kernel.F64 {
			f.imports["math"] = true
			return "(1 / math.Sqrt(" + f.bare(e.Args[0]) + "))"
		}
		return "float32(1 / " + f.mathCall("Sqrt", e.Kind, e.Args) + ")"
	}
	if e.Op == kernel.OpDot4 {
		a, b, c := f.bare(e.Args[0]), f.bare(e.Args[1]), f.bare(e.Args[2])
		var t []string
		for i := 0; i < 4; i++ {
			t = append(t, fmt.Sprintf("int32(uint8(%s>>%d))*int32(int8(%s>>%d))", a, 8*i, b, 8*i))
		}
		return "(" + c + " + " + strings.Join(t, " + ") + ")"
	}
	if e.Op == kernel.OpFMA && e.Kind == kernel.F32 {
		// float32(math.FMA(...)) would round twice; quant.FMA32 rounds once.
		f.imports["github.com/jitllm/jitllm/kernels/quant"] = true
		return "quant.FMA32(" + f.bare(e.Args[0]) + ", " + f.bare(e.Args[1]) + ", " + f.bare(e.Args[2]) + ")"
	}
	if name, ok := mathFuncs[e.Op]; ok {
		return f.mathCall(name, e.Kind, e.Args)
	}
	op, ok := binOps[e.Op]
	if !ok {
		f.fail("op %s", e.Op)
		return "?"
	}
	a, b := f.operands(e)
	s := "(" + a + " " + op + " " + b + ")"
	if e.Kind.IsFloat() {
		return goTypes[e.Kind] + s // rounds, and forbids FMA fusion
	}
	return s
}

// bare renders e without its outermost parentheses, for places that
// delimit it anyway (arguments, indices, right-hand sides).
func (f *fn) bare(e kernel.Expr) string {
	s := f.expr(e)
	if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
		return s
	}
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 && i != len(s)-1 {
				return s // "(a) + (b)": the first paren closes early
			}
		}
	}
	return s[1 : len(s)-1]
}

// operands renders a binary op's operands, leaving a constant untyped when
// the other side fixes the type (shift counts always).
func (f *fn) operands(e kernel.Expr) (string, string) {
	a, b := e.Args[0], e.Args[1]
	isC := func(x kernel.Expr) bool { return x.Op == kernel.OpConst }
	shift := e.Op == kernel.OpShl || e.Op == kernel.OpShr
	var sa, sb string
	if isC(a) && !isC(b) && !shift { // an untyped left shift operand takes its type from context
		sa = f.constant(a, true)
	} else {
		sa = f.expr(a)
	}
	if isC(b) && (!isC(a) || shift) {
		sb = f.constant(b, true)
	} else {
		sb = f.expr(b)
	}
	return sa, sb
}

func (f *fn) constant(c kernel.Expr, bare bool) string {
	s := constant(c, bare)
	if strings.Contains(s, "math.") {
		f.imports["math"] = true
	}
	return s
}

// mathCall calls package math, converting through float64 for f32.
func (f *fn) mathCall(name string, k kernel.Kind, args []kernel.Expr) string {
	f.imports["math"] = true
	s := "math." + name + "("
	for i, a := range args {
		if i > 0 {
			s += ", "
		}
		if k == kernel.F32 {
			s += "float64(" + f.bare(a) + ")"
		} else {
			s += f.bare(a)
		}
	}
	s += ")"
	if k == kernel.F32 {
		return "float32(" + s + ")"
	}
	return s
}

// load reads an element, or assembles a little-endian value from bytes so
// that constant offsets into a window need no bounds checks (the compiler
// merges the byte loads).
func (f *fn) load(e kernel.Expr) string {
	b, i := f.bufs[e.Buf], e.Args[0]
	if e.Kind == e.Buf.Elem {
		return b + "[" + f.bare(i) + "]"
	}
	t := goTypes[e.Kind]
	s := "("
	for x := 0; x < e.Kind.Bytes(); x++ {
		if x > 0 {
			s += " | "
		}
		ix := i
		if x > 0 {
			ix = i.Add(x)
		}
		s += fmt.Sprintf("%s(%s[%s])", t, b, f.bare(ix))
		if x > 0 {
			s += fmt.Sprintf("<<%d", 8*x)
		}
	}
	return s + ")"
}
