package kernel

import (
	"math"
	"strings"
	"testing"
)

func TestBuildErrors(t *testing.T) {
	cases := map[string]func(b *Builder){
		"add of u8 and i32": func(b *Builder) {
			x := b.Buffer("x", U8)
			b.Let("v", x.At(0).Add(x.At(1).Cvt(I32)))
		},
		"across a ParallelFor": func(b *Builder) {
			x := b.Buffer("x", F32)
			s := b.Acc("s", OpAdd, F(0))
			b.ParallelFor("r", 0, x.Len(), func(r Expr) { b.Fold(s, x.At(r)) })
		},
		"fold of f32 into f64": func(b *Builder) {
			x := b.Buffer("x", F32)
			s := b.Acc("s", OpAdd, D(0))
			b.For("i", 0, x.Len(), func(i Expr) { b.Fold(s, x.At(i)) })
		},
		"outside its 4 elements": func(b *Builder) {
			x := b.Buffer("x", U8)
			v := b.View("v", x, 0, 4)
			b.Let("a", v.U16(3))
		},
		"store of u8": func(b *Builder) {
			x, y := b.Buffer("x", U8), b.Buffer("y", F32)
			b.Store(y, 0, x.At(0))
		},
		"f32 load from a u8": func(b *Builder) { b.Let("a", b.Buffer("x", U8).load(F32, 0)) },
		"exp of i32":         func(b *Builder) { b.Let("a", b.Buffer("x", I32).At(0).Exp()) },
		"is not a u8":        func(b *Builder) { b.Let("a", b.Buffer("x", U8).At(0).And(0.5)) },
	}
	for want, f := range cases {
		b := New("k")
		f(b)
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v", want, err)
		}
	}
}

// Integer ops wrap as Go's do, shifts and conversions included.
func TestIntegerSemantics(t *testing.T) {
	b := New("ints")
	in, out := b.Buffer("in", U8), b.Buffer("out", I32)
	a, c := in.At(0), in.At(1)
	res := []Expr{
		a.Add(c).Cvt(I32),                        // u8 wraps
		a.Cvt(I8).Cvt(I32),                       // sign extension
		a.Cvt(I8).Shr(2).Cvt(I32),                // arithmetic shift
		a.Shr(2).Cvt(I32),                        // logical shift
		a.Shl(3).Cvt(I32),                        // u8 shl drops bits
		a.Cvt(I32).Sub(300).Div(7),               // truncating division
		a.Cvt(I32).Sub(300).Rem(7),               // remainder sign follows dividend
		in.U16(0).Cvt(I32),                       // little-endian
		in.U32(0).Xor(0xffffffff).Cvt(I32),       // u32 to i32 wraps
		Select(a.Lt(c), I(1), 2).Cvt(I32),        // select
		a.Cvt(F32).Mul(1.5).Cvt(I32),             // float to int truncates
		a.Min(c).Cvt(I32).Sub(a.Max(c).Cvt(I32)), // min/max
	}
	for i, e := range res {
		b.Store(out, i, e)
	}
	k := b.MustBuild()
	src := []byte{200, 100, 7, 9}
	got := make([]int32, len(res))
	if err := Run(k, src, got); err != nil {
		t.Fatal(err)
	}
	x, y := src[0], src[1]
	u32 := uint32(x) | uint32(y)<<8 | uint32(src[2])<<16 | uint32(src[3])<<24
	sel := int32(2)
	if x < y {
		sel = 1
	}
	want := []int32{int32(x + y), int32(int8(x)), int32(int8(x) >> 2), int32(x >> 2), int32(x << 3),
		(int32(x) - 300) / 7, (int32(x) - 300) % 7, int32(uint16(x) | uint16(y)<<8), int32(u32 ^ 0xffffffff),
		sel, int32(float32(x) * 1.5), int32(min(x, y)) - int32(max(x, y))}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("expr %d: %d, want %d", i, got[i], want[i])
		}
	}
}

func TestRunErrors(t *testing.T) {
	b := New("oob")
	x, y := b.Buffer("x", F32), b.Buffer("y", F32)
	b.For("i", 0, x.Len(), func(i Expr) { b.Store(y, i, x.At(i)) })
	k := b.MustBuild()
	if err := Run(k, make([]float32, 4), make([]float32, 3)); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("short y: %v", err)
	}
	if err := Run(k, make([]float32, 4)); err == nil {
		t.Error("missing argument accepted")
	}
	if err := Run(k, make([]byte, 4), make([]float32, 4)); err == nil {
		t.Error("[]byte for an f32 buffer accepted")
	}
	b = New("view")
	src := b.Buffer("src", U8)
	v := b.View("v", src, 2, 4)
	b.Let("a", v.U8(0))
	if err := Run(b.MustBuild(), make([]byte, 5)); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("view past the end: %v", err)
	}
}

// Apply keeps results and folds unrolled offsets into constants.
func TestApply(t *testing.T) {
	b := New("sum")
	x, y := b.Buffer("x", F32), b.Buffer("y", F32)
	s := b.Sum("s", F32, 0, x.Len(), func(i Expr) Expr { return x.At(i).Mul(x.At(i)) })
	b.For("j", 0, 3, func(j Expr) { b.Store(y, j.Add(1), s.Add(j.Cvt(F32))) })
	k := b.MustBuild()
	in := []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7}
	want := make([]float32, 4)
	if err := Run(k, in, want); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Schedule{{"s_i": {Unroll: 3}}, {"s_i": {Split: 2}}, {"s_i": {Split: 4, Unroll: 2}, "j": {Unroll: 8}}} {
		sk, err := Apply(k, s)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 4)
		if err := Run(sk, in, got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v: y[%d] = %v, want %v", s, i, got[i], want[i])
			}
		}
	}
	sk, _ := Apply(k, Schedule{"j": {Unroll: 3}})
	last := sk.Body[len(sk.Body)-1]
	if last.Op != SBlock || last.Body[0].Index.Op != OpConst || last.Body[0].Index.Int != 3 {
		t.Errorf("full unroll: last statement %+v", last)
	}
}

func TestF16ToF32(t *testing.T) {
	for h, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x0001: 0x1p-24, 0x7bff: 65504, 0x3555: 0.33325195} {
		if got := F16ToF32(h); got != want {
			t.Errorf("%#04x: %v, want %v", h, got, want)
		}
	}
	if !math.IsInf(float64(F16ToF32(0xfc00)), -1) || !math.IsNaN(float64(F16ToF32(0x7e00))) {
		t.Error("inf or NaN")
	}
}

// Dot4 is four byte products, unsigned by signed, plus the addend.
func TestDot4(t *testing.T) {
	b := New("dot4")
	ab, wb, yb := b.Buffer("a", U32), b.Buffer("w", U32), b.Buffer("y", I32)
	b.ParallelFor("i", 0, yb.Len(), func(i Expr) {
		b.Store(yb, i, Dot4(ab.At(i), wb.At(i), yb.At(i)))
	})
	kern := b.MustBuild()
	av := []uint32{0x01020304, 0xffffffff, 0}
	wv := []uint32{0x01ff7f80, 0x80808080, 0x12345678}
	y := []int32{5, -1, 7}
	if err := Run(kern, av, wv, y); err != nil {
		t.Fatal(err)
	}
	want := []int32{5 + 4*-128 + 3*127 + 2*-1 + 1*1, -1 + 4*255*-128, 7}
	for i := range y {
		if y[i] != want[i] {
			t.Errorf("dot4 %d: %d, want %d", i, y[i], want[i])
		}
	}
	if e := Dot4(I(1), I(2), I(3)); e.Err == nil {
		t.Error("dot4 of Ints built")
	}
}
