package kernel

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// sumKernel is y[0] = Σ x[i] (f32), y[1] = max |x[i]| from init 1, with the
// loop split over w threads (0: serial).
func sumKernel(w int) *Kernel {
	b := New("sum")
	x, y := b.Buffer("x", F32), b.Buffer("y", F32)
	s := b.Acc("s", OpAdd, F(0.5))
	m := b.Acc("m", OpMax, F(1))
	b.For("i", 0, x.Len(), func(i Expr) {
		b.Fold(s, x.At(i))
		b.Fold(m, x.At(i).Max(x.At(i).Neg()))
	})
	b.Store(y, 0, s.Get())
	b.Store(y, 1, m.Get())
	if w > 0 {
		b.Schedule("i", LoopSchedule{Threads: w})
	}
	return b.MustBuild()
}

// treeSum is the documented order, written out independently: per-thread
// f32 partials from zero, butterfly within 32s, halving over the 32s, then
// added to the initial value.
func treeSum(x []float32, w int, init float32) float32 {
	p := make([]float32, w)
	for i, v := range x {
		p[i%w] += v
	}
	g := min(w, 32)
	for h := g / 2; h >= 1; h /= 2 {
		q := make([]float32, w)
		for i := range p {
			q[i] = p[i] + p[i^h]
		}
		p = q
	}
	s := make([]float32, 0, w/32+1)
	for i := 0; i < w; i += g {
		s = append(s, p[i])
	}
	for h := len(s) / 2; h >= 1; h /= 2 {
		for i := 0; i < h; i++ {
			s[i] += s[i+h]
		}
	}
	return init + s[0]
}

func TestThreadsOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	differs := false
	for _, n := range []int{1, 31, 100, 1000, 4099} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(8)-4)))
		}
		serial := make([]float32, 2)
		if err := Run(sumKernel(0), x, serial); err != nil {
			t.Fatal(err)
		}
		for _, w := range []int{2, 8, 32, 64, 256, 1024} {
			y := make([]float32, 2)
			if err := Run(sumKernel(w), x, y); err != nil {
				t.Fatal(err)
			}
			if want := treeSum(x, w, 0.5); y[0] != want {
				t.Errorf("n=%d w=%d: sum %v, want %v", n, w, y[0], want)
			}
			if y[1] != serial[1] {
				t.Errorf("n=%d w=%d: max %v, serial %v", n, w, y[1], serial[1])
			}
			differs = differs || y[0] != serial[0]
		}
	}
	if !differs {
		t.Errorf("no split sum differs from the serial one: the test data cannot tell the orders apart")
	}
}

func TestThreadsErrors(t *testing.T) {
	cases := map[string]func(b *Builder){
		"not a power of two": func(b *Builder) {
			x := b.Buffer("x", F32)
			b.For("i", 0, x.Len(), func(i Expr) { b.Store(x, i, F(0)) })
			b.Schedule("i", LoopSchedule{Threads: 48})
		},
		"has Threads too": func(b *Builder) {
			x := b.Buffer("x", F32)
			b.For("i", 0, 4, func(i Expr) {
				b.For("j", 0, 4, func(j Expr) { b.Store(x, i.Mul(4).Add(j), F(0)) })
			})
			b.Schedule("i", LoopSchedule{Threads: 4})
			b.Schedule("j", LoopSchedule{Threads: 4})
		},
		"one width a kernel": func(b *Builder) {
			x := b.Buffer("x", F32)
			b.For("i", 0, 4, func(i Expr) { b.Store(x, i, F(0)) })
			b.For("j", 0, 4, func(j Expr) { b.Store(x, j, F(1)) })
			b.Schedule("i", LoopSchedule{Threads: 4})
			b.Schedule("j", LoopSchedule{Threads: 8})
		},
		"Set of m": func(b *Builder) {
			x := b.Buffer("x", F32)
			m := b.Acc("m", OpMax, F(0))
			b.For("i", 0, x.Len(), func(i Expr) { b.Set(m, x.At(i)) })
			b.Store(x, 0, m.Get())
			b.Schedule("i", LoopSchedule{Threads: 4})
		},
		"on a ParallelFor": func(b *Builder) {
			x := b.Buffer("x", F32)
			b.ParallelFor("r", 0, x.Len(), func(r Expr) { b.Store(x, r, F(0)) })
			b.Schedule("r", LoopSchedule{Threads: 4})
		},
	}
	for want, f := range cases {
		b := New("k")
		f(b)
		k := b.MustBuild()
		_, err := Apply(k, Schedule{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Apply error %v", want, err)
		}
		if err := Run(k, make([]float32, 16)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Run error %v", want, err)
		}
	}
}

func TestAlignedLoad(t *testing.T) {
	b := New("al")
	x, y := b.Buffer("x", U8), b.Buffer("y", U32)
	off := b.Scalar("off", Int)
	v := b.View("v", x, off, 8)
	b.Store(y, 0, v.Aligned(U32, 4))
	b.Store(y, 1, v.Aligned(U16, 2).Cvt(U32))
	k := b.MustBuild()
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	out := make([]uint32, 2)
	if err := Run(k, src, out, 4); err != nil {
		t.Fatal(err)
	}
	if out[0] != 0x0c0b0a09 || out[1] != 0x0807 {
		t.Errorf("aligned loads %#x %#x", out[0], out[1])
	}
	if err := Run(k, src, out, 2); err == nil || !strings.Contains(err.Error(), "not aligned") {
		t.Errorf("misaligned load: error %v", err)
	}
}
