package ptx

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// render builds one small kernel and renders it for sm_90.
func render(t *testing.T, name string, build func(b *kernel.Builder)) string {
	t.Helper()
	b := kernel.New(name)
	build(b)
	k, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	src, err := Render(k, Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, src, []*kernel.Kernel{k}, 90)
	return src
}

func has(t *testing.T, src string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(src, w) {
			t.Errorf("missing %q in\n%s", w, src)
		}
	}
}

// Instruction selection of each kind of op, on a parallel elementwise kernel.
func TestSelection(t *testing.T) {
	src := render(t, "Ints", func(b *kernel.Builder) {
		x, y := b.Buffer("x", kernel.I32), b.Buffer("y", kernel.I32)
		u := b.Buffer("u", kernel.U8)
		s := b.Scalar("s", kernel.I32)
		b.ParallelFor("i", 0, y.Len(), func(i kernel.Expr) {
			v := b.Let("v", x.At(i).Add(s))
			w := b.Let("w", u.U8(i).Cvt(kernel.I32).Shl(3))
			q := b.Let("q", u.U32(i.Mul(4)).Cvt(kernel.I32))
			b.Store(y, i, kernel.Select(v.Lt(w), v.Div(w.Max(1)), q.Rem(7)))
		})
	})
	has(t, src, ".param .s32 p3_s", "add.s32 ", "ld.global.u8 ", "ld.global.s32 ", "shl.b32 ", "setp.lt.s32 ",
		"div.s32 ", "rem.s32 ", "max.s32 ", "selp.b32 ", "st.global.s32 ", "bra $L", "%ctaid.x")
	if strings.Count(src, "ld.global.u8 ") != 5 { // one, plus a U32 from four bytes
		t.Errorf("want 5 byte loads:\n%s", src)
	}

	src = render(t, "Floats", func(b *kernel.Builder) {
		x, h, y := b.Buffer("x", kernel.F32), b.Buffer("h", kernel.U16), b.Buffer("y", kernel.F32)
		n := b.Buffer("n", kernel.I8)
		b.ParallelFor("i", 0, y.Len(), func(i kernel.Expr) {
			v := b.Let("v", x.At(i).Mul(h.At(i).F16ToF32()).Add(1).Div(3))
			r := b.Let("r", v.Sqrt().Rsqrt().FMA(v, v).Min(v))
			c := b.Let("c", v.Cvt(kernel.I8).Add(n.At(i)))
			b.Store(y, i, r.Sub(c.Cvt(kernel.F32)).Exp())
		})
	})
	has(t, src, "mul.rn.f32 ", "add.rn.f32 ", "div.rn.f32 ", "sub.rn.f32 ", "sqrt.rn.f32 ", "cvt.f32.f16 ",
		"ld.global.u16 ", "ld.global.s8 ", "cvt.rzi.s64.f32 ", "cvt.s32.s8 ", "cvt.rn.f32.s32 ", "fma.rn.f64 ",
		"setp.nan.f32 ", "// exp in f64", "cvt.rn.f32.f64 ")
	if strings.Contains(src, "ex2.approx") || strings.Contains(src, ".ftz") {
		t.Errorf("approximate or flushing op:\n%s", src)
	}

	src = render(t, "Wide", func(b *kernel.Builder) {
		x, y := b.Buffer("x", kernel.F64), b.Buffer("y", kernel.U32)
		k := b.Scalar("k", kernel.Int)
		b.Barrier()
		b.ParallelFor("i", 0, y.Len(), func(i kernel.Expr) {
			b.Barrier()
			s := b.Sum("s", kernel.F64, 0, k, func(j kernel.Expr) kernel.Expr { return x.At(i.Add(j)).Log() })
			b.Store(y, i, s.Cvt(kernel.U32).Shr(i).Xor(0xff))
		})
	})
	has(t, src, ".param .s64 p2_k", "ld.global.f64 ", "add.rn.f64 ", "// log in f64", "cvt.rzi.s64.f64 ",
		"cvt.u32.u64 ", "min.u64 ", "shr.u32 ", "xor.b32 ", "st.global.u32 ", "bar.sync 0;", "// barrier: nothing")
	if strings.Count(src, "bar.sync") != 1 {
		t.Errorf("want one bar.sync (at the top, where every thread reaches it):\n%s", src)
	}
}

// Without a grid loop the kernel runs on thread 0; with one it grid-strides.
func TestSerialGuard(t *testing.T) {
	src := render(t, "Serial", func(b *kernel.Builder) {
		x := b.Buffer("x", kernel.F32)
		b.For("i", 0, x.Len(), func(i kernel.Expr) { b.Store(x, i, x.At(i).Neg()) })
	})
	has(t, src, "launch: one thread", "or.b32 ", "neg.f32 ")
	src = render(t, "NegU", func(b *kernel.Builder) {
		x := b.Buffer("x", kernel.U8)
		b.For("i", 0, x.Len(), func(i kernel.Expr) { b.Store(x, i, x.At(i).Neg()) })
	})
	has(t, src, "neg.s32 ", "and.b32 ", "st.global.u8 ")
	if strings.Contains(src, "neg.u") {
		t.Errorf("neg has no unsigned types:\n%s", src)
	}
	src = render(t, "Stride", func(b *kernel.Builder) {
		x := b.Buffer("x", kernel.F32)
		b.ParallelFor("i", 0, x.Len(), func(i kernel.Expr) { b.Store(x, i, x.At(i).Neg()) })
	})
	has(t, src, "launch: loop i spread", "%nctaid.x", "mul.wide.u32 ")
}

// Orders lower to plain statements (SSet for a fused fold); a byte
// buffer's f32 is its bits moved; a kernel result is refused.
func TestOrdersAndBits(t *testing.T) {
	src := render(t, "Dot", func(b *kernel.Builder) {
		w, x, y := b.Buffer("w", kernel.U8), b.Buffer("x", kernel.F32), b.Buffer("y", kernel.F32)
		b.ParallelFor("r", 0, y.Len(), func(r kernel.Expr) {
			acc := b.Acc("acc", kernel.OpAdd, kernel.F(0))
			b.For("i", 0, x.Len(), func(i kernel.Expr) {
				b.Fold(acc, w.F32(r.Mul(x.Len()).Add(i).Mul(4)).Mul(x.At(i)))
			})
			b.Store(y, r, acc.Get())
		})
		b.Schedule("acc", kernel.LoopSchedule{Order: kernel.Order{Fused: true}})
	})
	has(t, src, "mov.b32 %f", "fma.rn.f64 ")
	b := kernel.New("Ret")
	x := b.Buffer("x", kernel.F32)
	b.Return(x.At(0))
	if _, err := Render(b.MustBuild(), Target{SM: 90}); err == nil || !strings.Contains(err.Error(), "Return") {
		t.Errorf("result: %v", err)
	}
}

func TestErrors(t *testing.T) {
	b := kernel.New("Bad")
	b.Buffer("x", kernel.Int)
	k := b.MustBuild()
	if _, err := Render(k, Target{SM: 90}); err == nil || !strings.Contains(err.Error(), "buffer x of int") {
		t.Errorf("int buffer: %v", err)
	}
	if _, err := Render(k, Target{SM: 61}); err == nil || !strings.Contains(err.Error(), "sm_61") {
		t.Errorf("sm_61: %v", err)
	}
}

// F32ToF16 is cvt.rn.f16.f32 (never .ftz) with the NaN rebuilt from its bits.
func TestF32ToF16Selection(t *testing.T) {
	b := kernel.New("Half")
	x, y := b.Buffer("x", kernel.F32), b.Buffer("y", kernel.U16)
	b.ParallelFor("i", 0, x.Len(), func(i kernel.Expr) { b.Store(y, i, x.At(i).F32ToF16()) })
	src, err := Render(b.MustBuild(), Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cvt.rn.f16.f32", "cvt.u32.u16", "st.global.u16"} {
		if !strings.Contains(src, want) {
			t.Errorf("missing %s in\n%s", want, src)
		}
	}
	if strings.Contains(src, ".ftz") {
		t.Error(".ftz used")
	}
}

// F32Bits is one mov.b32 from an f32 register to an integer one (no
// conversion); of a constant, the constant's bits.
func TestF32BitsSelection(t *testing.T) {
	src := render(t, "Bits", func(b *kernel.Builder) {
		x, y := b.Buffer("x", kernel.F32), b.Buffer("y", kernel.U32)
		b.ParallelFor("i", 0, x.Len(), func(i kernel.Expr) {
			b.Store(y, i, x.At(i).F32Bits().Xor(kernel.F(-2).F32Bits()))
		})
	})
	if !regexp.MustCompile(`mov\.b32 %r\d+, %f\d+;`).MatchString(src) {
		t.Errorf("no mov.b32 of an f32 register into an integer one in\n%s", src)
	}
	has(t, src, "xor.b32 ", "3221225472", "st.global.u32 ")
	if regexp.MustCompile(`cvt\.[a-z0-9.]*f32`).MatchString(src) {
		t.Errorf("an f32 conversion in\n%s", src)
	}
}

// Division and remainder by a constant power of two are shifts and masks
// (a 64-bit div is a software routine); other divisors keep div/rem.
func TestDivByPowersOfTwo(t *testing.T) {
	src := render(t, "DivPow2", func(b *kernel.Builder) {
		y, u := b.Buffer("y", kernel.I32), b.Buffer("u", kernel.U32)
		b.ParallelFor("i", 0, y.Len(), func(i kernel.Expr) {
			b.Store(y, i, i.Div(8).Add(i.Rem(4)).Cvt(kernel.I32))
			b.Store(u, i, u.At(i).Div(kernel.Const(kernel.U32, 16)).Add(u.At(i).Rem(kernel.Const(kernel.U32, 16))))
		})
	})
	for _, bad := range []string{"div.s64", "rem.s64", "div.u32", "rem.u32"} {
		if strings.Contains(src, bad) {
			t.Errorf("%s left for a power of two:\n%s", bad, src)
		}
	}
	has(t, src, "shr.s64 ", "shr.u64 ", "shr.u32 ", "and.b32 ")
	src = render(t, "DivBy12", func(b *kernel.Builder) {
		y := b.Buffer("y", kernel.I32)
		b.ParallelFor("i", 0, y.Len(), func(i kernel.Expr) { b.Store(y, i, i.Div(12).Cvt(kernel.I32)) })
	})
	has(t, src, "div.s64 ")
}

// Aligned words of a 16-byte-aligned window at a 16-aligned index are
// loaded a chunk at a time, each chunk once; a window of a size that is
// no multiple of 16, or an index not known to be one, keeps word loads.
func TestVectorLoads(t *testing.T) {
	window := func(size, step int) func(b *kernel.Builder) {
		return func(b *kernel.Builder) {
			w, y := b.Buffer("w", kernel.U8), b.Buffer("y", kernel.U32)
			b.ParallelFor("r", 0, y.Len(), func(r kernel.Expr) {
				blk := b.View("blk", w, r.Mul(size), size)
				o := b.Let("o", r.Rem(2).Mul(step))
				sum := kernel.Const(kernel.U32, 0)
				for c := 0; c < 8; c++ {
					sum = sum.Add(blk.Aligned(kernel.U32, o.Add(4*c)))
				}
				b.Store(y, r, sum.Add(blk.Aligned(kernel.U32, 4)))
			})
		}
	}
	src := render(t, "Vec", window(64, 32))
	if n := strings.Count(src, "ld.global.v4.u32"); n != 3 || strings.Contains(src, "ld.global.u32") {
		t.Errorf("want 3 chunk loads and no word loads, got %d:\n%s", n, src)
	}
	for _, c := range []struct {
		name       string
		size, step int
	}{{"Odd", 36, 32}, {"Step8", 64, 8}} {
		src := render(t, c.name, window(c.size, c.step))
		if strings.Contains(src, "ld.global.v4") && c.name == "Odd" {
			t.Errorf("%s: a chunk load in a window of %d bytes:\n%s", c.name, c.size, src)
		}
		if c.name == "Step8" && strings.Count(src, "ld.global.u32") < 8 {
			t.Errorf("%s: words at an index only 8-aligned should load alone:\n%s", c.name, src)
		}
	}
}

// A cooperative loop with Unroll runs that many of a thread's iterations a
// trip (each copy of the body at its own index), then the rest one at a
// time.
func TestUnrolledThreadLoop(t *testing.T) {
	src := render(t, "Unrolled", func(b *kernel.Builder) {
		x, y := b.Buffer("x", kernel.F32), b.Buffer("y", kernel.F32)
		b.ParallelFor("r", 0, y.Len(), func(r kernel.Expr) {
			s := b.Acc("s", kernel.OpAdd, kernel.F(0))
			b.For("u", 0, x.Len(), func(u kernel.Expr) { b.Fold(s, x.At(u)) })
			b.Store(y, r, s.Get())
		})
		b.Schedule("u", kernel.LoopSchedule{Threads: 32, Unroll: 3})
	})
	if n := strings.Count(src, "ld.global.f32"); n != 4 { // three copies, then the remainder's
		t.Errorf("want 4 loads (3 unrolled + 1), got %d:\n%s", n, src)
	}
	has(t, src, "add.s64 %rd", ", 64;", ", 96;") // the copies' indices and the trip's stride
}

// F16ToF32AnyNaN is the conversion instruction alone; F16ToF32 rebuilds a
// NaN's payload after it.
func TestF16ToF32AnyNaN(t *testing.T) {
	conv := func(anyNaN bool) string {
		return render(t, "Widen", func(b *kernel.Builder) {
			h, y := b.Buffer("h", kernel.U16), b.Buffer("y", kernel.F32)
			b.ParallelFor("i", 0, y.Len(), func(i kernel.Expr) {
				if anyNaN {
					b.Store(y, i, h.At(i).F16ToF32AnyNaN())
				} else {
					b.Store(y, i, h.At(i).F16ToF32())
				}
			})
		})
	}
	loose, exact := conv(true), conv(false)
	has(t, loose, "cvt.f32.f16 ")
	has(t, exact, "cvt.f32.f16 ", "2139095040") // 0x7f800000, the rebuilt NaN's exponent
	if strings.Contains(loose, "2139095040") {
		t.Errorf("the loose conversion rebuilds NaNs:\n%s", loose)
	}
}
