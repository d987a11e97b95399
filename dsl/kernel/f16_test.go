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
