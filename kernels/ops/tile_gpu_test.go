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

// DequantF16 gives every block type's decoded values rounded to f16, bit
// for bit.
func TestDequantF16(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const n = 512
	for _, d := range ops.Blocks() {
		typ := opstest.Type(d.Name)
		var w []byte
		for range 3 {
			w = append(w, opstest.Row(typ, n, nil, r)...)
		}
		want := make([]float32, 3*n)
		if err := quant.Dequantize(typ, w, want); err != nil {
			t.Fatal(err)
		}
		got := make([]uint16, 3*n)
		if err := k.Run(ops.DequantF16(d), w, got); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != quant.F32ToF16(want[i]) {
				t.Fatalf("%s value %d: %#04x, want %#04x (%v)", d.Name, i, got[i], quant.F32ToF16(want[i]), want[i])
			}
		}
	}
}

// MatMulTile and MatMulBlock are the product of f16-rounded operands
// within f32 rounding, on shapes that leave partial tiles both ways (rows
// and weight rows not multiples of the warp tile or CTA block).
func TestMatMulTileMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	tile := ops.MatMulTile()
	block := ops.MatMulBlock(k.BlockShape{WM: 2, WN: 2, M: 1, N: 2}, k.F32)
	block16 := ops.MatMulBlock(k.BlockShape{WM: 2, WN: 2, M: 1, N: 2}, k.U16)
	for _, c := range []struct {
		rows, n, cols int
		kern          *k.Kernel
	}{
		{3, 8, 32, tile}, {70, 40, 96, tile}, {64, 32, 256, tile}, {70, 40, 96, ops.MatMulTileShape(2, 4)}, {33, 20, 64, ops.MatMulTileShape(1, 2)},
		{3, 8, 32, block}, {70, 40, 96, block}, {64, 32, 256, block}, {33, 20, 64, ops.MatMulBlock(k.BlockShape{WM: 1, WN: 2, M: 2, N: 4}, k.F32)},
		{70, 40, 96, block16}, {33, 20, 64, ops.MatMulBlock(k.BlockShape{WM: 1, WN: 2, M: 2, N: 4}, k.U16)},
	} {
		x := opstest.Floats(c.rows*c.cols, 1, r)
		wh := make([]uint16, c.n*c.cols)
		for i := range wh {
			wh[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		y := make([]float32, c.rows*c.n)
		for i := range y {
			y[i] = float32(math.NaN()) // every element must be stored
		}
		var xin any = x
		if c.kern.Params[0].Buf.Elem == k.U16 { // x given as f16 bits
			xh := make([]uint16, len(x))
			for i, v := range x {
				xh[i] = quant.F32ToF16(v)
			}
			xin = xh
		}
		if err := k.Run(c.kern, xin, wh, y, c.cols); err != nil {
			t.Fatal(err)
		}
		for row := range c.rows {
			for o := range c.n {
				var want, mag float64
				for j := range c.cols {
					p := float64(float64(quant.F16ToF32(quant.F32ToF16(x[row*c.cols+j]))) * float64(quant.F16ToF32(wh[o*c.cols+j])))
					want += p
					mag += math.Abs(p)
				}
				got := float64(y[row*c.n+o])
				if math.IsNaN(got) || math.Abs(got-want) > float64(1e-6*mag)+1e-30 {
					t.Fatalf("%s %dx%dx%d: y[%d][%d] = %v, want %v (Σ|p| %v)", c.kern.Name, c.rows, c.n, c.cols, row, o, got, want, mag)
				}
			}
		}
	}
}
