package kernel_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// stageKernel copies row i of w (n values, from w's element i·n+shift) to
// y's row i, each iteration staging its row (room values) first; if store,
// it also writes into w while the stage holds.
func stageKernel(n, shift, room int, store bool) *k.Kernel {
	b := k.New("st")
	w, y := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	b.ParallelFor("i", 0, y.Len().Div(n), func(i k.Expr) {
		b.Stage(w, i.Mul(n), n, room)
		row := b.View("row", w, i.Mul(n).Add(shift), n-shift)
		b.For("j", 0, n-shift, func(j k.Expr) { b.Store(y, i.Mul(n).Add(j), row.At(j)) })
		if store {
			b.Store(w, i.Mul(n), k.F(0))
		}
	})
	return b.MustBuild()
}

// A stage changes nothing; a load outside it (through a window too), a
// store into its buffer, a range past the buffer and a stage of a window
// are errors. It lasts to the end of its list: the next iteration's loads
// are held to that iteration's stage.
func TestStage(t *testing.T) {
	w := []float32{1, 2, 3, 4, 5, 6}
	y := make([]float32, 6)
	if err := k.Run(stageKernel(3, 0, 3, false), w, y); err != nil {
		t.Fatal(err)
	}
	for i := range w {
		if y[i] != w[i] {
			t.Errorf("y[%d] = %v, want %v", i, y[i], w[i])
		}
	}
	// a room smaller than the range changes nothing either (the target
	// reads such a range where it lies)
	if err := k.Run(stageKernel(3, 0, 1, false), w, y); err != nil {
		t.Fatal(err)
	}
	// row i's window from i·3+1 reads one past the row: outside the stage
	b := k.New("past")
	wb, yb := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	b.ParallelFor("i", 0, 2, func(i k.Expr) {
		b.Stage(wb, i.Mul(3), 3, 3)
		row := b.View("row", wb, i.Mul(3).Add(1), 3)
		b.Store(yb, i, row.At(2))
	})
	if err := k.Run(b.MustBuild(), w, y); err == nil || !strings.Contains(err.Error(), "outside its stage") {
		t.Errorf("a load past the stage: %v", err)
	}
	if err := k.Run(stageKernel(3, 0, 3, true), w, y); err == nil || !strings.Contains(err.Error(), "while it is staged") {
		t.Errorf("a store into the staged buffer: %v", err)
	}
	if err := k.Run(stageKernel(4, 0, 4, false), w, make([]float32, 8)); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("a stage past w: %v", err)
	}
	for _, c := range []struct {
		build func(b *k.Builder, w *k.Buf)
		want  string
	}{
		{func(b *k.Builder, w *k.Buf) { b.Stage(w, k.F(0), 1, 1) }, "offset of kind f32"},
		{func(b *k.Builder, w *k.Buf) { b.Stage(w, 0, 1, 0) }, "room for 0"},
		{func(b *k.Builder, w *k.Buf) { b.Stage(b.View("v", w, 0, 2), 0, 1, 1) }, "a window"},
	} {
		b := k.New("bad")
		w := b.Buffer("w", k.U8)
		b.ParallelFor("i", 0, 1, func(i k.Expr) { c.build(b, w) })
		if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q: %v", c.want, err)
		}
	}
}
