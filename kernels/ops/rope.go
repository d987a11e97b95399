package ops

import (
	"github.com/jitllm/jitllm/dsl"
	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Rope is RopeNormal or RopeNeox(x, y []float32, pos, headDim, dims int,
// base, freqScale float32): each head of headDim values in x has its first
// dims values rotated by angle pos·freqScale·base^(-2i/dims) for pair i,
// pairs (2i, 2i+1) (dsl.RopeNormal) or (i, i+dims/2) (dsl.RopeNeox); the rest
// is copied. y may be x.
func Rope(mode int) *k.Kernel {
	name := "RopeNormal"
	if mode == dsl.RopeNeox {
		name = "RopeNeox"
	}
	b := k.New(name)
	b.Doc("rotates the first dims values of each head of x into y by position pos.")
	x, y := b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	pos, hd, dims := b.Scalar("pos", k.Int), b.Scalar("headDim", k.Int), b.Scalar("dims", k.Int)
	base, fs := b.Scalar("base", k.F32), b.Scalar("freqScale", k.F32)
	p := b.Let("p", pos.Cvt(k.F32).Mul(fs))
	half := b.Let("half", dims.Div(2))
	b.ParallelFor("h", 0, x.Len().Div(hd), func(h k.Expr) {
		o := b.Let("o", h.Mul(hd))
		b.For("i", 0, half, func(i k.Expr) {
			theta := b.Let("theta", p.Mul(base.Pow(i.Mul(-2).Cvt(k.F32).Div(dims.Cvt(k.F32)))))
			c, s := b.Let("c", theta.Cos()), b.Let("s", theta.Sin())
			var a0, a1 k.Expr
			if mode == dsl.RopeNeox {
				a0 = b.Let("a0", o.Add(i))
				a1 = b.Let("a1", a0.Add(half))
			} else {
				a0 = b.Let("a0", o.Add(i.Mul(2)))
				a1 = b.Let("a1", a0.Add(1))
			}
			x0, x1 := b.Let("x0", x.At(a0)), b.Let("x1", x.At(a1))
			b.Store(y, a0, x0.Mul(c).Sub(x1.Mul(s)))
			b.Store(y, a1, x0.Mul(s).Add(x1.Mul(c)))
		})
		b.For("i", half.Mul(2), hd, func(i k.Expr) { b.Store(y, o.Add(i), x.At(o.Add(i))) })
	})
	return b.MustBuild()
}
