package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// RMSNorm is RMSNorm(x, w, y []float32, eps float32), or without w when
// weighted is false: y = x / sqrt(mean(x²) + eps) · w. As ggml: x² in f32
// summed in f64, mean rounded to f32, then 1/sqrt in f32 and the scale (and
// the weight) applied in f32.
func RMSNorm(weighted bool) *k.Kernel {
	name := "RMSNorm"
	if !weighted {
		name = "RMSNormNoWeight"
	}
	b := k.New(name)
	b.Doc("sets y to x / sqrt(mean(x²) + eps), times w where present.")
	x := b.Buffer("x", k.F32)
	var w *k.Buf
	if weighted {
		w = b.Buffer("w", k.F32)
	}
	y := b.Buffer("y", k.F32)
	eps := b.Scalar("eps", k.F32)
	n := b.Let("n", x.Len())
	ss := b.Sum("ss", k.F64, 0, n, func(i k.Expr) k.Expr {
		xi := b.Let("xi", x.At(i))
		return xi.Mul(xi).Cvt(k.F64)
	})
	mean := b.Let("mean", ss.Div(n.Cvt(k.F64)).Cvt(k.F32))
	scale := b.Let("scale", k.F(1).Div(mean.Add(eps).Sqrt()))
	b.For("i", 0, n, func(i k.Expr) {
		v := x.At(i).Mul(scale)
		if weighted {
			v = v.Mul(w.At(i))
		}
		b.Store(y, i, v)
	})
	return b.MustBuild()
}

// Softmax is Softmax(x, y []float32): y = exp(x - max x) / Σ exp(x - max x),
// as ggml: the sum of the f32 exponentials in f64, then a multiply by the
// f32 rounding of its inverse. len(x) must be at least 1.
func Softmax() *k.Kernel {
	b := k.New("Softmax")
	b.Doc("sets y to the softmax of x.")
	x, y := b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	n := b.Let("n", x.Len())
	mx := b.Acc("mx", k.OpMax, x.At(0))
	b.For("i", 1, n, func(i k.Expr) { b.Fold(mx, x.At(i)) })
	sum := b.Acc("sum", k.OpAdd, k.D(0))
	b.For("i", 0, n, func(i k.Expr) {
		e := b.Let("e", x.At(i).Sub(mx.Get()).Exp())
		b.Store(y, i, e)
		b.Fold(sum, e.Cvt(k.F64))
	})
	inv := b.Let("inv", k.D(1).Div(sum.Get()).Cvt(k.F32))
	b.For("i", 0, n, func(i k.Expr) { b.Store(y, i, y.At(i).Mul(inv)) })
	return b.MustBuild()
}
