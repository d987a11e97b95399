package kernel

import (
	"strings"
	"testing"
)

// A specialized kernel computes what the kernel computes with those
// scalars, takes the rest, and refuses names it does not have.
func TestSpecialize(t *testing.T) {
	b := New("Scale")
	x, y := b.Buffer("x", F32), b.Buffer("y", F32)
	n, s := b.Scalar("n", Int), b.Scalar("s", F32)
	b.ParallelFor("i", 0, n, func(i Expr) { b.Store(y, i, x.At(i.Div(n.Div(4))).Mul(s)) })
	k := b.MustBuild()
	x0 := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	want := make([]float32, 8)
	if err := Run(k, x0, want, 8, float32(1.5)); err != nil {
		t.Fatal(err)
	}
	sk, err := Specialize(k, map[string]any{"n": 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(sk.Params) != 3 || !strings.HasPrefix(sk.Name, "Scale_") || !strings.Contains(sk.Name, "n8") {
		t.Fatalf("specialized %s has %d parameters", sk.Name, len(sk.Params))
	}
	got := make([]float32, 8)
	if err := Run(sk, x0, got, float32(1.5)); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("y[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := Specialize(k, map[string]any{"m": 3}); err == nil || !strings.Contains(err.Error(), "no scalar parameter m") {
		t.Errorf("an unknown name: %v", err)
	}
	if _, err := Specialize(k, map[string]any{"n": 1.5}); err == nil {
		t.Error("a float for an Int: no error")
	}
}
