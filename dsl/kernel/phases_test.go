package kernel

import (
	"slices"
	"strings"
	"testing"
)

// scaleInto is y[i] = x[i]·c, a grid loop.
func scaleInto(name string, c float64) *Kernel {
	b := New(name)
	x, y := b.Buffer("x", F32), b.Buffer("y", F32)
	b.ParallelFor("i", 0, y.Len(), func(i Expr) { b.Store(y, i, x.At(i).Mul(F(c))) })
	return b.MustBuild()
}

// A phased kernel runs its phases in turn: the second reads what the first
// stored, and the results are each phase's own.
func TestPhasesRunInTurn(t *testing.T) {
	a, s := scaleInto("Double", 2), sumRows()
	k, err := Phases("DoubleThenSum", a, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(k.Params) != len(a.Params)+len(s.Params)+1 || k.Params[len(k.Params)-1].Buf.Elem != U32 {
		t.Fatalf("parameters %d (want each phase's and the barrier)", len(k.Params))
	}
	x := []float32{1, 2, 3, 4, 5, 6}
	mid, got := make([]float32, 6), make([]float32, 2)
	bar := []uint32{0, 0}
	if err := Run(k, x, mid, mid, got, 3, bar); err != nil {
		t.Fatal(err)
	}
	if want := []float32{12, 30}; !slices.Equal(got, want) || bar[0] != 0 || bar[1] != 0 {
		t.Errorf("sums %v, want %v (barrier %v untouched)", got, want, bar)
	}
	per, err := PhaseArgs(k, []any{x, mid, mid, got, 3, bar})
	if err != nil || len(per) != 2 || len(per[0]) != 2 || len(per[1]) != 3 {
		t.Errorf("PhaseArgs: %v, %v", per, err)
	}
	if err := Run(k, x, mid, mid, got, 3, []float32{0, 0}); err == nil || !strings.Contains(err.Error(), "barrier") {
		t.Errorf("a float barrier: %v", err)
	}
	if err := Run(k, x, mid, mid, got, bar); err == nil {
		t.Errorf("too few arguments ran")
	}
	for _, c := range []struct {
		ks   []*Kernel
		want string
	}{
		{[]*Kernel{a}, "two or more"},
		{[]*Kernel{a, k}, "phases of its own"},
	} {
		if _, err := Phases("Bad", c.ks...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Phases of %d kernels: %v, want %q", len(c.ks), err, c.want)
		}
	}
}

// sumRows is y[r] = Σ_i x[r·n+i].
func sumRows() *Kernel {
	b := New("SumRows")
	x, y := b.Buffer("x", F32), b.Buffer("y", F32)
	n := b.Scalar("n", Int)
	b.ParallelFor("r", 0, y.Len(), func(r Expr) {
		s := b.Acc("s", OpAdd, F(0))
		b.For("i", 0, n, func(i Expr) { b.Fold(s, x.At(r.Mul(n).Add(i))) })
		b.Store(y, r, s.Get())
	})
	return b.MustBuild()
}
