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

// QuantizeQ8_K's and QuantizeQ8_0's quants times their scales are
// QuantRoundQ8_K's and QuantRoundQ8_0's values, bit for bit, zero blocks
// included.
func TestQuantize(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	x := opstest.Floats(4*256, 3, r)
	for j := 256; j < 512; j++ {
		x[j] = 0
	}
	for _, c := range []struct {
		quantize, round *k.Kernel
		qk              int
	}{{ops.QuantizeQ8_K(), ops.QuantRoundQ8_K(), 256}, {ops.QuantizeQ8_0(), ops.QuantRoundQ8_0(), 32}} {
		xq, xd := make([]byte, len(x)), make([]float32, len(x)/c.qk)
		if err := k.Run(c.quantize, x, xq, xd); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(x))
		if err := k.Run(ops.QuantRoundWarp(c.round), x, want); err != nil {
			t.Fatal(err)
		}
		for j := range x {
			if got := float32(int8(xq[j])) * xd[j/c.qk]; math.Float32bits(got) != math.Float32bits(want[j]) {
				t.Fatalf("%s value %d: %v·%v = %v, %s %v", c.quantize.Name, j, int8(xq[j]), xd[j/c.qk], got, c.round.Name, want[j])
			}
		}
	}
}

// partner quantizes x as the integer mat-vec of weight type name reads it.
func partner(t *testing.T, name string, x []float32) (xq []byte, xd []float32) {
	qk, kern := 256, ops.QuantizeQ8_K()
	if name == "Q8_0" {
		qk, kern = 32, ops.QuantizeQ8_0()
	}
	xq, xd = make([]byte, len(x)), make([]float32, len(x)/qk)
	if err := k.Run(kern, x, xq, xd); err != nil {
		t.Fatal(err)
	}
	return xq, xd
}

// The integer mat-vecs are the decoded weights times the quantized
// activation within f32 rounding (the integer sums are exact); the Add and
// SiLU forms store the residual sum and the SiLU of the plain form's bits.
func TestMatVecDot(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const n, out = 768, 9
	x := opstest.Floats(n, 2, r)
	res := opstest.Floats(out, 1, r)
	for name, mk := range ops.DotMatVecs() {
		xq, xd := partner(t, name, x)
		qk := n / len(xd)
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
				p := float64(float64(vals[o*n+j]) * float64(int8(xq[j])) * float64(xd[j/qk]))
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
			if want := v / (1 + float32(math.Exp(float64(-v)))); math.Abs(float64(ys[o]-want)) > float64(1e-6*math.Abs(float64(want)))+1e-30 {
				t.Errorf("%s SiLU row %d: %v, want %v", name, o, ys[o], want)
			}
		}
	}
}
