package kernel_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/quant"
)

// F32ToF16 (the op's semantics) is ggml's conversion bit for bit, on every
// half's neighbourhood and random bit patterns, through the interpreter too.
func TestF32ToF16(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var xs []float32
	for h := 0; h < 1<<16; h++ {
		f := kernel.F16ToF32(uint16(h))
		xs = append(xs, f, math.Nextafter32(f, float32(math.Inf(1))), math.Nextafter32(f, float32(math.Inf(-1))))
	}
	for i := 0; i < 200000; i++ {
		xs = append(xs, math.Float32frombits(r.Uint32()))
	}
	b := kernel.New("ToF16")
	x, y := b.Buffer("x", kernel.F32), b.Buffer("y", kernel.U16)
	b.ParallelFor("i", 0, x.Len(), func(i kernel.Expr) { b.Store(y, i, x.At(i).F32ToF16()) })
	got := make([]uint16, len(xs))
	if err := kernel.Run(b.MustBuild(), xs, got); err != nil {
		t.Fatal(err)
	}
	for i, v := range xs {
		if w := quant.F32ToF16(v); kernel.F32ToF16(v) != w || got[i] != w {
			t.Fatalf("%g (%#x): %#x, interpreted %#x, want %#x", v, math.Float32bits(v), kernel.F32ToF16(v), got[i], w)
		}
	}
}

// F32Bits gives an f32's bits and inverts F32FromBits, on every exponent
// with random mantissas, the specials and random bit patterns; a signaling
// NaN comes out quieted (the interpreter holds f32s as float64s), every
// other pattern unchanged.
func TestF32Bits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	us := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 1, 0x807fffff, 0x7f7fffff}
	for e := uint32(0); e < 256; e++ {
		us = append(us, e<<23|r.Uint32()&0x807fffff)
	}
	for i := 0; i < 100000; i++ {
		us = append(us, r.Uint32())
	}
	xs := make([]float32, len(us))
	for i, u := range us {
		xs[i] = math.Float32frombits(u)
	}
	b := kernel.New("Bits")
	x, w, y, back := b.Buffer("x", kernel.F32), b.Buffer("w", kernel.U32), b.Buffer("y", kernel.U32), b.Buffer("back", kernel.U32)
	b.ParallelFor("i", 0, x.Len(), func(i kernel.Expr) {
		b.Store(y, i, x.At(i).F32Bits())
		b.Store(back, i, w.At(i).F32FromBits().F32Bits())
	})
	got, gotBack := make([]uint32, len(us)), make([]uint32, len(us))
	if err := kernel.Run(b.MustBuild(), xs, us, got, gotBack); err != nil {
		t.Fatal(err)
	}
	for i, u := range us {
		want := u
		if u&0x7fffffff > 0x7f800000 {
			want |= 0x400000
		}
		if got[i] != want || gotBack[i] != want {
			t.Fatalf("%#x: bits %#x, through F32FromBits %#x, want %#x", u, got[i], gotBack[i], want)
		}
	}
}

// F32Bits of a constant is the constant of its bits; of anything but an
// F32 it is an error.
func TestF32BitsConstant(t *testing.T) {
	for _, v := range []float64{1.5, math.Copysign(0, -1), math.Inf(-1), 1e-45} {
		c := kernel.Const(kernel.F32, v).F32Bits()
		if c.Op != kernel.OpConst || c.Kind != kernel.U32 || uint32(c.Int) != math.Float32bits(float32(v)) {
			t.Errorf("%g: %s %s %#x, want the constant %#x", v, c.Op, c.Kind, c.Int, math.Float32bits(float32(v)))
		}
	}
	if e := kernel.Const(kernel.U32, 7).F32Bits(); e.Err == nil {
		t.Error("f32bits of a u32 built")
	}
	if e := kernel.D(1).F32Bits(); e.Err == nil {
		t.Error("f32bits of an f64 built")
	}
}
