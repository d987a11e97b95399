package kernel_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// prefetchKernel copies w to y, each iteration prefetching n elements of
// w from its own.
func prefetchKernel(n int) *k.Kernel {
	b := k.New("pf")
	w, y := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		b.Prefetch(w, i, n)
		b.Store(y, i, w.At(i))
	})
	return b.MustBuild()
}

// A prefetch changes nothing; one past its buffer is an error (its range
// is checked as a load's would be).
func TestPrefetch(t *testing.T) {
	w, y := []float32{1, 2, 3, 4}, make([]float32, 4)
	if err := k.Run(prefetchKernel(1), w, y); err != nil {
		t.Fatal(err)
	}
	for i := range w {
		if y[i] != w[i] {
			t.Errorf("y[%d] = %v, want %v", i, y[i], w[i])
		}
	}
	if err := k.Run(prefetchKernel(2), w, y); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("a prefetch past w: %v", err)
	}
	b := k.New("bad")
	w2 := b.Buffer("w", k.U8)
	b.ParallelFor("i", 0, 1, func(i k.Expr) { b.Prefetch(w2, k.F(0), 1) })
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "offset of kind f32") {
		t.Errorf("a float offset: %v", err)
	}
}
