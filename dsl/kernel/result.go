package kernel

import (
	"fmt"
	"math"
)

// Return makes e the kernel's result, evaluated after its body (a row dot
// product returns its sum rather than storing it, so the Go target can
// give it the func(n int, w, x []byte) float32 shape its callers use). It
// is allowed once, at the top level, after the accumulators it reads.
func (b *Builder) Return(e Expr) {
	switch {
	case !b.check("return", e):
	case len(b.stack) > 1:
		b.fail("return inside a loop")
	case b.k.Result != nil:
		b.fail("second return")
	default:
		b.k.Result = e
	}
}

// F32FromBits reads the receiver's U32 bits as an IEEE single (an f32 in
// a byte buffer, such as a Q8_K block's scale or an F32 weight row).
func (a *Node) F32FromBits() Expr {
	if err := firstErr(a); err != nil {
		return &Node{Op: OpF32FromBits, Err: err}
	}
	if a.Kind != U32 {
		return bad("f32frombits of %s", a.Kind)
	}
	return mk(OpF32FromBits, F32, a)
}

// F32Bits is the U32 bits of the receiver (F32) as an IEEE single,
// F32FromBits's inverse: what rounding an f32 to a narrower float by its
// bits (bfloat16) starts from. The interpreter holds an f32 as a float64,
// so a signaling NaN reaches it already quieted (Go's conversions set the
// quiet bit) where a GPU's move keeps it; every other value's bits are
// exact on every target.
func (a *Node) F32Bits() Expr {
	if err := firstErr(a); err != nil {
		return &Node{Op: OpF32Bits, Err: err}
	}
	if a.Kind != F32 {
		return bad("f32bits of %s", a.Kind)
	}
	if a.Op == OpConst { // a constant's bits, so no target moves an f32 immediate
		return Const(U32, int64(math.Float32bits(float32(a.Float))))
	}
	return mk(OpF32Bits, U32, a)
}

// F32 loads the little-endian f32 at byte offset off of a byte buffer.
func (b *Buf) F32(off any) Expr { return b.load(U32, off).F32FromBits() }

// Call interprets k as Run does and returns its Result as a Go value of
// the result's kind (float32 for F32, float64, int, int32, bool, …).
func Call(k *Kernel, args ...any) (any, error) {
	if k.Result == nil {
		return nil, fmt.Errorf("kernel %s: no result", k.Name)
	}
	var out val
	if err := run(k, &out, args...); err != nil {
		return nil, err
	}
	switch r := k.Result.Kind; r {
	case F32:
		return float32(out.f), nil
	case F64:
		return out.f, nil
	case Bool:
		return out.i != 0, nil
	case U8:
		return uint8(out.i), nil
	case I8:
		return int8(out.i), nil
	case U16:
		return uint16(out.i), nil
	case U32:
		return uint32(out.i), nil
	case I32:
		return int32(out.i), nil
	}
	return int(out.i), nil
}

func f32FromBits(v val) val { return val{f: float64(math.Float32frombits(uint32(v.i)))} }

func f32Bits(v val) val { return val{i: int64(math.Float32bits(float32(v.f)))} }
