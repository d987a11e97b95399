package ptx

import (
	"fmt"
	"math"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// memType is the ld/st type of a buffer element (narrow loads extend into
// 32-bit registers: zero for u8/u16, sign for s8).
var memType = map[kernel.Kind]string{
	kernel.U8: "u8", kernel.I8: "s8", kernel.U16: "u16", kernel.U32: "u32", kernel.I32: "s32",
	kernel.F32: "f32", kernel.F64: "f64",
}

// itype is the PTX type of integer arithmetic on a kind's registers.
func itype(k kernel.Kind) string {
	switch k {
	case kernel.I8, kernel.I32:
		return "s32"
	case kernel.Int:
		return "s64"
	}
	return "u32"
}

func btype(k kernel.Kind) string {
	if k == kernel.Int || k == kernel.F64 {
		return "b64"
	}
	return "b32"
}

func ftype(k kernel.Kind) string {
	if k == kernel.F64 {
		return "f64"
	}
	return "f32"
}

var cmpNames = map[kernel.Op]string{
	kernel.OpEq: "eq", kernel.OpNe: "ne", kernel.OpLt: "lt", kernel.OpLe: "le", kernel.OpGt: "gt", kernel.OpGe: "ge",
}

// fcmpNames are Go's float comparisons: ordered, except != (true on NaN).
var fcmpNames = map[kernel.Op]string{
	kernel.OpEq: "eq", kernel.OpNe: "neu", kernel.OpLt: "lt", kernel.OpLe: "le", kernel.OpGt: "gt", kernel.OpGe: "ge",
}

func (f *fn) mov(k kernel.Kind, d, s string) {
	if k == kernel.Bool {
		f.ins("mov.pred %s, %s", d, s)
		return
	}
	f.ins("mov.%s %s, %s", btypeOf(classOf(k)), d, s)
}

func btypeOf(c class) string {
	switch c {
	case c64:
		return "b64"
	case cF32:
		return "f32"
	case cF64:
		return "f64"
	}
	return "b32"
}

// wrap re-wraps r in place to narrow kind k, as Go's arithmetic does.
func (f *fn) wrap(k kernel.Kind, r string) {
	switch k {
	case kernel.U8:
		f.ins("and.b32 %s, %s, 255", r, r)
	case kernel.U16:
		f.ins("and.b32 %s, %s, 65535", r, r)
	case kernel.I8:
		f.ins("cvt.s32.s8 %s, %s", r, r)
	}
}

// constant materialises c in a register (ptxas folds it back).
func (f *fn) constant(c kernel.Expr) string {
	r := f.reg(classOf(c.Kind))
	switch {
	case c.Kind == kernel.Bool:
		x := f.reg(c32)
		f.ins("mov.u32 %s, %d", x, c.Int)
		f.ins("setp.ne.u32 %s, %s, 0", r, x)
	case c.Kind == kernel.F32:
		f.ins("mov.f32 %s, 0f%08X", r, math.Float32bits(float32(c.Float)))
	case c.Kind == kernel.F64:
		f.ins("mov.f64 %s, 0d%016X", r, math.Float64bits(c.Float))
	case c.Kind == kernel.Int:
		f.ins("mov.b64 %s, %d", r, c.Int)
	case c.Kind == kernel.U32:
		f.ins("mov.b32 %s, %d", r, uint32(c.Int))
	default:
		f.ins("mov.b32 %s, %d", r, int32(c.Int))
	}
	return r
}

func (f *fn) f64(x float64) string {
	r := f.reg(cF64)
	f.ins("mov.f64 %s, 0d%016X", r, math.Float64bits(x))
	return r
}

// expr evaluates e into a register of e's class.
func (f *fn) expr(e kernel.Expr) string {
	if f.err != nil {
		return "%err"
	}
	if e.Err != nil {
		f.fail("%v", e.Err)
		return "%err"
	}
	switch e.Op {
	case kernel.OpConst:
		return f.constant(e)
	case kernel.OpVar:
		r, ok := f.vars[e.Var]
		if !ok {
			f.fail("%s used outside its scope", e.Var.Name)
			return "%err"
		}
		return r
	case kernel.OpLen:
		b := f.buf(e.Buf)
		if b == nil {
			return "%err"
		}
		if b.n != "" {
			return b.n
		}
		r := f.reg(c64)
		f.ins("mov.b64 %s, %d", r, b.size)
		return r
	case kernel.OpLoad:
		return f.load(e)
	case kernel.OpSelect:
		return f.sel(e)
	case kernel.OpCvt:
		return f.cvt(e.Args[0].Kind, e.Kind, f.expr(e.Args[0]))
	case kernel.OpF16ToF32:
		if e.AnyNaN { // the instruction alone: NaN payloads need not survive
			h, r := f.reg(c16), f.reg(cF32)
			f.ins("cvt.u16.u32 %s, %s", h, f.expr(e.Args[0]))
			f.ins("cvt.f32.f16 %s, %s", r, h)
			return r
		}
		return f.f16(f.expr(e.Args[0]))
	case kernel.OpF32ToF16:
		return f.tof16(f.expr(e.Args[0]))
	case kernel.OpF32FromBits:
		r := f.reg(cF32)
		f.ins("mov.b32 %s, %s", r, f.expr(e.Args[0]))
		return r
	case kernel.OpF32Bits:
		r := f.reg(c32)
		f.ins("mov.b32 %s, %s", r, f.expr(e.Args[0]))
		return r
	case kernel.OpNeg:
		return f.neg(e.Kind, f.expr(e.Args[0]))
	case kernel.OpFMA:
		return f.fma(e)
	case kernel.OpDot4:
		var ops [3]string
		for i, x := range e.Args {
			ops[i] = f.expr(x)
			if x.Op == kernel.OpConst { // a register operand, as dp4a wants
				c := f.reg(c32)
				f.ins("mov.b32 %s, %s", c, ops[i])
				ops[i] = c
			}
		}
		a, b, c := ops[0], ops[1], ops[2]
		r := f.reg(c32)
		f.ins("dp4a.u32.s32 %s, %s, %s, %s", r, a, b, c)
		return r
	case kernel.OpSqrt, kernel.OpRsqrt:
		a := f.expr(e.Args[0])
		t := ftype(e.Kind)
		r := f.reg(classOf(e.Kind))
		f.ins("sqrt.rn.%s %s, %s", t, r, a)
		if e.Op == kernel.OpRsqrt { // 1/sqrt, each rounded, as the interpreter
			one := f.reg(classOf(e.Kind))
			if e.Kind == kernel.F32 {
				f.ins("mov.f32 %s, 0f3F800000", one)
			} else {
				f.ins("mov.f64 %s, 0d3FF0000000000000", one)
			}
			q := f.reg(classOf(e.Kind))
			f.ins("div.rn.%s %s, %s, %s", t, q, one, r)
			r = q
		}
		return r
	case kernel.OpExp, kernel.OpLog, kernel.OpSin, kernel.OpCos:
		return f.math(e.Op, e.Kind, f.expr(e.Args[0]), "")
	case kernel.OpPow:
		a := f.expr(e.Args[0])
		return f.math(e.Op, e.Kind, a, f.expr(e.Args[1]))
	}
	if len(e.Args) != 2 {
		f.fail("op %s unsupported", e.Op)
		return "%err"
	}
	a := f.expr(e.Args[0])
	if e.Op == kernel.OpShl || e.Op == kernel.OpShr {
		return f.shift(e.Op, e.Kind, a, e.Args[1])
	}
	if c := e.Args[1]; (e.Op == kernel.OpDiv || e.Op == kernel.OpRem) && e.Kind.IsInt() &&
		c.Op == kernel.OpConst && c.Int > 0 && c.Int&(c.Int-1) == 0 {
		return f.divPow2(e.Op, e.Kind, a, c.Int)
	}
	return f.binop(e.Op, e.Args[0].Kind, a, f.expr(e.Args[1]))
}

// binop is a op b on operands of kind k (the result is Bool for a
// comparison).
func (f *fn) binop(op kernel.Op, k kernel.Kind, a, b string) string {
	switch {
	case k == kernel.Bool:
		return f.boolCmp(op, a, b)
	case k.IsFloat():
		return f.fbin(op, k, a, b)
	case k.IsInt():
		return f.ibin(op, k, a, b)
	}
	f.fail("%s of %s", op, k)
	return "%err"
}

func (f *fn) fbin(op kernel.Op, k kernel.Kind, a, b string) string {
	t := ftype(k)
	if c, ok := fcmpNames[op]; ok {
		p := f.reg(cPred)
		f.ins("setp.%s.%s %s, %s, %s", c, t, p, a, b)
		return p
	}
	name := map[kernel.Op]string{kernel.OpAdd: "add", kernel.OpSub: "sub", kernel.OpMul: "mul", kernel.OpDiv: "div"}[op]
	switch {
	case name != "":
		r := f.reg(classOf(k))
		f.ins("%s.rn.%s %s, %s, %s", name, t, r, a, b)
		return r
	case op == kernel.OpMin || op == kernel.OpMax:
		return f.fminmax(op, k, a, b)
	case op == kernel.OpPow:
		return f.math(op, k, a, b)
	}
	f.fail("%s of %s unsupported", op, k)
	return "%err"
}

// fminmax is Go's min and max: NaN if either is NaN, and -0 below +0.
func (f *fn) fminmax(op kernel.Op, k kernel.Kind, a, b string) string {
	t, c, ic := ftype(k), classOf(k), c32
	if k == kernel.F64 {
		ic = c64
	}
	cmp, bits := "lt", "or" // min(-0, +0): the OR of the bits keeps the sign
	if op == kernel.OpMax {
		cmp, bits = "gt", "and"
	}
	p, pe, pn := f.reg(cPred), f.reg(cPred), f.reg(cPred)
	r, z, s, out := f.reg(c), f.reg(c), f.reg(c), f.reg(c)
	ia, ib, iz := f.reg(ic), f.reg(ic), f.reg(ic)
	bt := btype(k)
	f.ins("setp.%s.%s %s, %s, %s", cmp, t, p, a, b)
	f.ins("selp.%s %s, %s, %s, %s", t, r, a, b, p)
	f.ins("setp.eq.%s %s, %s, %s", t, pe, a, b)
	f.ins("mov.%s %s, %s", bt, ia, a)
	f.ins("mov.%s %s, %s", bt, ib, b)
	f.ins("%s.%s %s, %s, %s", bits, bt, iz, ia, ib)
	f.ins("mov.%s %s, %s", bt, z, iz)
	f.ins("selp.%s %s, %s, %s, %s", t, r, z, r, pe)
	f.ins("setp.nan.%s %s, %s, %s", t, pn, a, b)
	f.ins("add.rn.%s %s, %s, %s", t, s, a, b)
	f.ins("selp.%s %s, %s, %s, %s", t, out, s, r, pn)
	return out
}

func (f *fn) ibin(op kernel.Op, k kernel.Kind, a, b string) string {
	it, bt := itype(k), btype(k)
	if c, ok := cmpNames[op]; ok {
		p := f.reg(cPred)
		f.ins("setp.%s.%s %s, %s, %s", c, it, p, a, b)
		return p
	}
	r := f.reg(classOf(k))
	switch op {
	case kernel.OpAdd, kernel.OpSub:
		f.ins("%s.%s %s, %s, %s", op, it, r, a, b)
		f.wrap(k, r)
	case kernel.OpMul:
		f.ins("mul.lo.%s %s, %s, %s", it, r, a, b)
		f.wrap(k, r)
	case kernel.OpAnd, kernel.OpOr, kernel.OpXor:
		f.ins("%s.%s %s, %s, %s", op, bt, r, a, b)
	case kernel.OpMin, kernel.OpMax:
		f.ins("%s.%s %s, %s, %s", op, it, r, a, b)
	case kernel.OpDiv, kernel.OpRem:
		f.ins("%s.%s %s, %s, %s", op, it, r, a, b)
		f.wrap(k, r)
		if k == kernel.I32 || k == kernel.Int {
			// x / -1 is -x and x % -1 is 0 in Go, even for the most negative x
			p, alt := f.reg(cPred), f.reg(classOf(k))
			f.ins("setp.eq.%s %s, %s, -1", it, p, b)
			if op == kernel.OpDiv {
				f.ins("neg.%s %s, %s", it, alt, a)
			} else {
				f.ins("mov.%s %s, 0", bt, alt)
			}
			out := f.reg(classOf(k))
			f.ins("selp.%s %s, %s, %s, %s", bt, out, alt, r, p)
			r = out
		}
	default:
		f.fail("%s of %s unsupported", op, k)
	}
	return r
}

// divPow2 is a / c or a % c for a constant power of two c, with Go's
// truncating semantics, in shifts: ptxas leaves a 64-bit div or rem by a
// constant as a call to its software division (~100 instructions), which
// the decode mat-vecs paid every unit of every row.
func (f *fn) divPow2(op kernel.Op, k kernel.Kind, a string, c int64) string {
	sh := 0
	for int64(1)<<sh < c {
		sh++
	}
	bt, it, w := btype(k), itype(k), 32
	if k == kernel.Int {
		w = 64
	}
	r := f.reg(classOf(k))
	if !k.Signed() { // narrow unsigned kinds are held zero-extended
		if op == kernel.OpDiv {
			f.ins("shr.u32 %s, %s, %d", r, a, sh)
		} else {
			f.ins("and.b32 %s, %s, %d", r, a, c-1)
		}
		return r
	}
	// a negative a is biased by c−1 first, so the arithmetic shift truncates toward zero
	t := f.reg(classOf(k))
	f.ins("shr.%s %s, %s, %d", it, t, a, w-1)
	if sh > 0 {
		f.ins("shr.u%d %s, %s, %d", w, t, t, w-sh)
	} else {
		f.ins("mov.%s %s, 0", bt, t)
	}
	f.ins("add.%s %s, %s, %s", it, t, t, a)
	if op == kernel.OpDiv {
		f.ins("shr.%s %s, %s, %d", it, r, t, sh)
		return r
	}
	f.ins("and.%s %s, %s, %d", bt, t, t, -c)
	f.ins("sub.%s %s, %s, %s", it, r, a, t)
	return r
}

// boolCmp compares Bools as the interpreter does, false < true.
func (f *fn) boolCmp(op kernel.Op, a, b string) string {
	p := f.reg(cPred)
	switch op {
	case kernel.OpEq, kernel.OpNe:
		f.ins("xor.pred %s, %s, %s", p, a, b)
		if op == kernel.OpEq {
			f.ins("not.pred %s, %s", p, p)
		}
		return p
	}
	ia, ib := f.reg(c32), f.reg(c32)
	f.ins("selp.u32 %s, 1, 0, %s", ia, a)
	f.ins("selp.u32 %s, 1, 0, %s", ib, b)
	f.ins("setp.%s.u32 %s, %s, %s", cmpNames[op], p, ia, ib)
	return p
}

// shift shifts a (kind k) by a count of any integer kind. PTX clamps counts
// past the width, which is Go's answer (0, or the sign for >> of a signed
// kind); the count is clamped to 64 first so a 64-bit count cannot wrap.
func (f *fn) shift(op kernel.Op, k kernel.Kind, a string, count kernel.Expr) string {
	var n string
	if count.Op == kernel.OpConst {
		n = fmt.Sprint(min(uint64(count.Int), 64))
	} else {
		c := f.expr(count)
		n = f.reg(c32)
		if count.Kind == kernel.Int {
			t := f.reg(c64)
			f.ins("min.u64 %s, %s, 64", t, c)
			f.ins("cvt.u32.u64 %s, %s", n, t)
		} else {
			f.ins("min.u32 %s, %s, 64", n, c)
		}
	}
	r := f.reg(classOf(k))
	if op == kernel.OpShl {
		f.ins("shl.%s %s, %s, %s", btype(k), r, a, n)
		f.wrap(k, r)
	} else {
		f.ins("shr.%s %s, %s, %s", itype(k), r, a, n)
	}
	return r
}

func (f *fn) neg(k kernel.Kind, a string) string {
	r := f.reg(classOf(k))
	if k.IsFloat() {
		f.ins("neg.%s %s, %s", ftype(k), r, a)
		return r
	}
	// neg has only signed types; two's complement makes it right for all
	f.ins("neg.%s %s, %s", map[bool]string{true: "s64", false: "s32"}[k == kernel.Int], r, a)
	f.wrap(k, r)
	return r
}

// fma rounds a·b+c once in f64 and then to the kind, as the interpreter
// (an f32 fma.rn would round once, which differs in rare double-rounding
// cases).
func (f *fn) fma(e kernel.Expr) string {
	var x [3]string
	for i, a := range e.Args {
		x[i] = f.expr(a)
		if e.Kind == kernel.F32 {
			w := f.reg(cF64)
			f.ins("cvt.f64.f32 %s, %s", w, x[i])
			x[i] = w
		}
	}
	r := f.reg(cF64)
	f.ins("fma.rn.f64 %s, %s, %s, %s", r, x[0], x[1], x[2])
	if e.Kind == kernel.F32 {
		n := f.reg(cF32)
		f.ins("cvt.rn.f32.f64 %s, %s", n, r)
		return n
	}
	return r
}

func (f *fn) sel(e kernel.Expr) string {
	c, a, b := f.expr(e.Args[0]), f.expr(e.Args[1]), f.expr(e.Args[2])
	r := f.reg(classOf(e.Kind))
	if e.Kind == kernel.Bool {
		t, nc := f.reg(cPred), f.reg(cPred)
		f.ins("and.pred %s, %s, %s", t, c, a)
		f.ins("not.pred %s, %s", nc, c)
		f.ins("and.pred %s, %s, %s", nc, nc, b)
		f.ins("or.pred %s, %s, %s", r, t, nc)
		return r
	}
	f.ins("selp.%s %s, %s, %s, %s", btypeOf(classOf(e.Kind)), r, a, b, c)
	return r
}

// cvt is Go's conversion from kind from to kind to. Float to integer
// truncates toward zero to an int64 and then wraps, which is Go's answer
// (on amd64) wherever the value fits an int64.
func (f *fn) cvt(from, to kernel.Kind, a string) string {
	r := f.reg(classOf(to))
	signed := from.Signed()
	src := map[bool]string{true: "s", false: "u"}[signed] + map[bool]string{true: "64", false: "32"}[from == kernel.Int]
	switch {
	case from.IsInt() && to == kernel.Int:
		if from == kernel.Int {
			return a
		}
		f.ins("cvt.%s.%s %s, %s", map[bool]string{true: "s64", false: "u64"}[signed], src, r, a)
	case from.IsInt() && to.IsInt():
		if from == kernel.Int {
			f.ins("cvt.u32.u64 %s, %s", r, a)
		} else {
			f.ins("mov.b32 %s, %s", r, a)
		}
		f.wrap(to, r)
	case from.IsInt() && to.IsFloat():
		f.ins("cvt.rn.%s.%s %s, %s", ftype(to), src, r, a)
	case from == kernel.F32 && to == kernel.F64:
		f.ins("cvt.f64.f32 %s, %s", r, a)
	case from == kernel.F64 && to == kernel.F32:
		f.ins("cvt.rn.f32.f64 %s, %s", r, a)
	case from.IsFloat() && to.IsInt():
		w := r
		if to != kernel.Int {
			w = f.reg(c64)
		}
		f.ins("cvt.rzi.s64.%s %s, %s", ftype(from), w, a)
		if to != kernel.Int {
			return f.cvt(kernel.Int, to, w)
		}
	default:
		f.fail("cvt %s to %s unsupported", from, to)
	}
	return r
}

// f16 widens the half in the low 16 bits of a: cvt.f32.f16 is exact, and a
// NaN is rebuilt from its bits so its payload survives as the interpreter's.
func (f *fn) f16(a string) string {
	h, cv := f.reg(c16), f.reg(cF32)
	f.ins("cvt.u16.u32 %s, %s", h, a)
	f.ins("cvt.f32.f16 %s, %s", cv, h)
	t, s, m, fb := f.reg(c32), f.reg(c32), f.reg(c32), f.reg(cF32)
	p, r := f.reg(cPred), f.reg(cF32)
	f.ins("and.b32 %s, %s, 32767", t, a)
	f.ins("setp.gt.u32 %s, %s, 31744", p, t)
	f.ins("and.b32 %s, %s, 32768", s, a)
	f.ins("shl.b32 %s, %s, 16", s, s)
	f.ins("and.b32 %s, %s, 1023", m, a)
	f.ins("shl.b32 %s, %s, 13", m, m)
	f.ins("or.b32 %s, %s, %s", s, s, m)
	f.ins("or.b32 %s, %s, 2139095040", s, s)
	f.ins("mov.b32 %s, %s", fb, s)
	f.ins("selp.f32 %s, %s, %s, %s", r, fb, cv, p)
	return r
}

// tof16 rounds the f32 in a to the bits of the nearest half: cvt.rn.f16.f32
// rounds to nearest even (no .ftz, so subnormals on both sides are kept);
// a NaN is rebuilt from its bits (sign, 0x7e00, the top ten payload bits)
// as the interpreter's conversion gives it.
func (f *fn) tof16(a string) string {
	h, cv := f.reg(c16), f.reg(c32)
	f.ins("cvt.rn.f16.f32 %s, %s", h, a)
	f.ins("cvt.u32.u16 %s, %s", cv, h)
	bits, t, s, m := f.reg(c32), f.reg(c32), f.reg(c32), f.reg(c32)
	p, r := f.reg(cPred), f.reg(c32)
	f.ins("mov.b32 %s, %s", bits, a)
	f.ins("and.b32 %s, %s, 2147483647", t, bits)
	f.ins("setp.gt.u32 %s, %s, 2139095040", p, t)
	f.ins("shr.u32 %s, %s, 16", s, bits)
	f.ins("and.b32 %s, %s, 32768", s, s)
	f.ins("and.b32 %s, %s, 8388607", m, bits)
	f.ins("shr.u32 %s, %s, 13", m, m)
	f.ins("or.b32 %s, %s, %s", s, s, m)
	f.ins("or.b32 %s, %s, 32256", s, s)
	f.ins("selp.b32 %s, %s, %s, %s", r, s, cv, p)
	return r
}

// load reads an element, or assembles a little-endian U16/U32 from the
// bytes of a U8 buffer (their alignment is unknown, so one byte at a time,
// unless the load is Aligned).
func (f *fn) load(e kernel.Expr) string {
	b := f.buf(e.Buf)
	if b == nil {
		return "%err"
	}
	if r, ok := f.vecLoad(b, e); ok {
		return r
	}
	base, off := f.addr(b, e.Args[0], e.Buf.Elem.Bytes())
	if e.Kind == e.Buf.Elem || e.Aligned { // an aligned U16/U32 of a byte buffer is one access
		r := f.reg(classOf(e.Kind))
		f.ins("%s.%s %s, %s", b.ld(), memType[e.Kind], r, at(base, off))
		return r
	}
	r := f.reg(c32)
	f.ins("%s.u8 %s, %s", b.ld(), r, at(base, off))
	for x := 1; x < e.Kind.Bytes(); x++ {
		v, o := f.reg(c32), f.reg(c32)
		f.ins("%s.u8 %s, %s", b.ld(), v, at(base, off+int64(x)))
		f.ins("shl.b32 %s, %s, %d", v, v, 8*x)
		f.ins("or.b32 %s, %s, %s", o, r, v)
		r = o
	}
	return r
}
