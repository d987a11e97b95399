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

// QuantizeQ8_K's quants times its scales are QuantRoundQ8_K's values, bit
// for bit, zero blocks included.
func TestQuantizeQ8_K(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	x := opstest.Floats(4*256, 3, r)
	for j := 256; j < 512; j++ {
		x[j] = 0
	}
	xq, xd := make([]byte, len(x)), make([]float32, len(x)/256)
	if err := k.Run(ops.QuantizeQ8_K(), x, xq, xd); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(x))
	if err := k.Run(ops.QuantRoundWarp(ops.QuantRoundQ8_K()), x, want); err != nil {
		t.Fatal(err)
	}
	for j := range x {
		if got := float32(int8(xq[j])) * xd[j/256]; math.Float32bits(got) != math.Float32bits(want[j]) {
			t.Fatalf("value %d: %v·%v = %v, QuantRoundQ8_K %v", j, int8(xq[j]), xd[j/256], got, want[j])
		}
	}
}

// The integer mat-vecs are the decoded weights times the quantized
// activation within f32 rounding (the integer sums are exact); the Add and
// SiLU forms store the residual sum and the SiLU of the plain form's bits.
func TestMatVecDot(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const n, out = 768, 9
	x := opstest.Floats(n, 2, r)
	xq, xd := make([]byte, n), make([]float32, n/256)
	if err := k.Run(ops.QuantizeQ8_K(), x, xq, xd); err != nil {
		t.Fatal(err)
	}
	res := opstest.Floats(out, 1, r)
	for name, mk := range ops.DotMatVecs() {
		typ := opstest.Type(name)
		var w []byte
		for range out {
			w = append(w, opstest.Row(typ, n, nil, r)...)
		}
		vals := make([]float32, out*n)
		if err := quant.Dequantize(typ, w, vals); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, out)
		if err := k.Run(mk(), w, xq, xd, y); err != nil {
			t.Fatal(err)
		}
		for o := range out {
			var want, mag float64
			for j := range n {
				p := float64(vals[o*n+j]) * float64(int8(xq[j])) * float64(xd[j/256])
				want += p
				mag += math.Abs(p)
			}
			if d := math.Abs(float64(y[o]) - want); d > 1e-5*mag {
				t.Errorf("%s row %d: %v, want %v (Σ|p| %v)", name, o, y[o], want, mag)
			}
		}
		ya, ys := make([]float32, out), make([]float32, out)
		if err := k.Run(ops.DotMatVecsAdd()[name](), w, xq, xd, res, ya); err != nil {
			t.Fatal(err)
		}
		if err := k.Run(ops.DotMatVecsSiLU()[name](), w, xq, xd, ys); err != nil {
			t.Fatal(err)
		}
		for o := range out {
			if ya[o] != res[o]+y[o] {
				t.Errorf("%s Add row %d: %v, want %v", name, o, ya[o], res[o]+y[o])
			}
			v := y[o]
			if want := v / (1 + float32(math.Exp(float64(-v)))); math.Abs(float64(ys[o]-want)) > 1e-6*math.Abs(float64(want))+1e-30 {
				t.Errorf("%s SiLU row %d: %v, want %v", name, o, ys[o], want)
			}
		}
	}
}
