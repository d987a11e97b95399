package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// q6kMatrix is out random rows of n Q6_K values and their Q6_KA repacking.
func q6kMatrix(t *testing.T, n, out int, r *rand.Rand) (w, wa []byte) {
	for range out {
		w = append(w, opstest.Row(quant.Q6_K, n, nil, r)...)
	}
	return w, repackedQ6_KA(t, w)
}

// repackedQ6_KA is Q6_K matrix w repacked as Q6_KA.
func repackedQ6_KA(t *testing.T, w []byte) []byte {
	t.Helper()
	wa := make([]byte, len(w))
	if err := ops.RepackQ6_KA(wa, w); err != nil {
		t.Fatal(err)
	}
	return wa
}

// A Q6_KA block decodes to its eight Q6_K blocks' values, bit for bit, and
// a length that is not whole groups is refused.
func TestQ6_KADecodesAsQ6_K(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	const n = 2 * 2048
	w, wa := q6kMatrix(t, n, 3, r)
	want, got := make([]float32, 3*n), make([]float32, 3*n)
	if err := k.Run(ops.Dequant(ops.Q6_K), w, want); err != nil {
		t.Fatal(err)
	}
	if err := k.Run(ops.Dequant(ops.Q6_KA), wa, got); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d: Q6_KA %v, Q6_K %v", i, got[i], want[i])
		}
	}
	if err := ops.RepackQ6_KA(make([]byte, 210*7), w[:210*7]); err == nil {
		t.Error("seven Q6_K blocks repacked")
	}
}

// Q6_KA's integer mat-vec is the decoded weights times the quantized
// activation within f32 rounding, in every form and in shapes of several
// rows and CTAs, and each shape's rows-a-group forms its one-row bits.
func TestMatVecDotQ6_KA(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const n, out = 3 * 2048, 8
	x := opstest.Floats(n, 2, r)
	res := opstest.Floats(out, 1, r)
	xq, xd := partner(t, "Q6_K", x)
	w, wa := q6kMatrix(t, n, out, r)
	vals := make([]float32, out*n)
	if err := quant.Dequantize(quant.Q6_K, w, vals); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, out)
	if err := k.Run(ops.DotMatVec("", "Q6_KA", ops.DotShape{}), wa, xq, xd, y); err != nil {
		t.Fatal(err)
	}
	for o := range out {
		var want, mag float64
		for j := range n {
			p := float64(float64(vals[o*n+j]) * float64(int8(xq[j])) * float64(xd[j/256]))
			want += p
			mag += math.Abs(p)
		}
		if d := math.Abs(float64(y[o]) - want); d > 1e-5*mag {
			t.Errorf("row %d: %v, want %v (Σ|p| %v)", o, y[o], want, mag)
		}
	}
	for _, sh := range []ops.DotShape{{Rows: 2}, {Rows: 4, Unroll: 2}} {
		got := make([]float32, out)
		if err := k.Run(ops.DotMatVec("", "Q6_KA", sh), wa, xq, xd, got); err != nil {
			t.Fatal(err)
		}
		for o := range out {
			if math.Float32bits(got[o]) != math.Float32bits(y[o]) {
				t.Errorf("shape %v row %d: %v, one row a warp %v", sh, o, got[o], y[o])
			}
		}
	}
	ya := make([]float32, out)
	if err := k.Run(ops.DotMatVec("Add", "Q6_KA", ops.DotShape{Threads: 128}), wa, xq, xd, res, ya); err != nil {
		t.Fatal(err)
	}
	for o := range out {
		if d := math.Abs(float64(ya[o] - res[o] - y[o])); d > float64(1e-5*math.Abs(float64(y[o])))+1e-6 {
			t.Errorf("Add, a CTA of 128, row %d: %v, want %v + %v", o, ya[o], res[o], y[o])
		}
	}
}
