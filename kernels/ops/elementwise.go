package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// The elementwise kernels of the graph ops add, mul, scale and silu, one
// grid-loop iteration per value, each value computed as the CPU backend
// computes it (f32, every op rounded).

// Elementwise is every elementwise kernel, for renderers and tests.
func Elementwise() []*k.Kernel { return []*k.Kernel{AddF32(), MulF32(), ScaleF32(), SiLUF32()} }

func binaryF32(name, doc string, op func(a, b k.Expr) k.Expr) *k.Kernel {
	b := k.New(name)
	b.Doc(doc)
	x, z, y := b.Buffer("a", k.F32), b.Buffer("b", k.F32), b.Buffer("y", k.F32)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) { b.Store(y, i, op(x.At(i), z.At(i))) })
	return b.MustBuild()
}

// AddF32 is AddF32(a, b, y []float32): y = a + b.
func AddF32() *k.Kernel {
	return binaryF32("AddF32", "sets y to a + b.", func(a, b k.Expr) k.Expr { return a.Add(b) })
}

// MulF32 is MulF32(a, b, y []float32): y = a · b.
func MulF32() *k.Kernel {
	return binaryF32("MulF32", "sets y to a * b.", func(a, b k.Expr) k.Expr { return a.Mul(b) })
}

// ScaleF32 is ScaleF32(a, y []float32, f float32): y = a · f.
func ScaleF32() *k.Kernel {
	b := k.New("ScaleF32")
	b.Doc("sets y to a * f.")
	a, y := b.Buffer("a", k.F32), b.Buffer("y", k.F32)
	f := b.Scalar("f", k.F32)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) { b.Store(y, i, a.At(i).Mul(f)) })
	return b.MustBuild()
}

// SiLUF32 is SiLUF32(x, y []float32): y = x / (1 + exp(-x)), the f32
// exponential correctly rounded (ggml's AVX512 ggml_v_expf differs from it
// by an ulp or so).
func SiLUF32() *k.Kernel {
	b := k.New("SiLUF32")
	b.Doc("sets y to x * sigmoid(x).")
	x, y := b.Buffer("x", k.F32), b.Buffer("y", k.F32)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		b.Store(y, i, silu(b, x.At(i)))
	})
	return b.MustBuild()
}

// silu is x / (1 + exp(-x)) in f32, x bound once.
func silu(b *k.Builder, x k.Expr) k.Expr {
	v := b.Let("v", x)
	return v.Div(k.F(1).Add(v.Neg().Exp()))
}
