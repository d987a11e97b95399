package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

func run(t *testing.T, k *kernel.Kernel, args ...any) {
	t.Helper()
	if err := kernel.Run(k, args...); err != nil {
		t.Fatal(err)
	}
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// The interpreted decode is ggml's, bit for bit, as kernels/quant has it.
func TestDequantMatchesQuant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, d := range ops.Blocks() {
		qt, ok := opstest.Types[d.Name]
		if !ok {
			t.Fatalf("%s: no quant type", d.Name)
		}
		if l, _ := quant.LayoutOf(qt); l.BlockSize != d.QK || l.BlockBytes != d.Bytes {
			t.Fatalf("%s: layout %d/%d, quant says %d/%d", d.Name, d.QK, d.Bytes, l.BlockSize, l.BlockBytes)
		}
		const nb = 9
		src := opstest.Blocks(d, nb, r)
		got, want := make([]float32, nb*d.QK), make([]float32, nb*d.QK)
		run(t, ops.Dequant(d), src, got)
		if err := quant.Dequantize(qt, src, want); err != nil {
			t.Fatal(err)
		}
		sameBits(t, d.Name, got, want)
	}
}

func TestMatVecAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, d := range ops.Blocks() {
		const rows = 5
		cols := 2 * 256
		w := opstest.Blocks(d, rows*cols/d.QK, r)
		x := opstest.Floats(cols, 1, r)
		y := make([]float32, rows)
		run(t, ops.MatVec(d), w, x, y)
		wf := make([]float32, rows*cols)
		if err := quant.Dequantize(opstest.Types[d.Name], w, wf); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < rows; j++ {
			var s, mag float64
			for i := 0; i < cols; i++ {
				p := float64(float64(wf[j*cols+i]) * float64(x[i]))
				s += p
				mag += math.Abs(p)
			}
			if math.Abs(float64(y[j])-s) > float64(1e-5*mag)+1e-30 {
				t.Errorf("%s row %d: %v, want %v (Σ|p| %v)", d.Name, j, y[j], s, mag)
			}
		}
	}
}

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 64, 1001} {
		x, w := opstest.Floats(n, 3, r), opstest.Floats(n, 2, r)
		y, y0 := make([]float32, n), make([]float32, n)
		const eps = 1e-5
		run(t, ops.RMSNorm(true), x, w, y, float32(eps))
		run(t, ops.RMSNorm(false), x, y0, float32(eps))
		var ss float64
		for _, v := range x {
			ss += float64(float64(v) * float64(v))
		}
		sc := 1 / math.Sqrt(ss/float64(n)+eps)
		for i := range x {
			want := float64(float64(x[i]) * sc)
			if d := math.Abs(float64(y0[i]) - want); d > float64(1e-6*math.Abs(want))+1e-7 {
				t.Fatalf("n=%d no weight [%d]: %v, want %v", n, i, y0[i], want)
			}
			if d := math.Abs(float64(y[i]) - float64(want*float64(w[i]))); d > float64(1e-6*math.Abs(want*float64(w[i])))+1e-7 {
				t.Fatalf("n=%d [%d]: %v, want %v", n, i, y[i], want*float64(w[i]))
			}
		}
	}
}

func TestSoftmax(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 3, 100} {
		x := opstest.Floats(n, 20, r)
		y := make([]float32, n)
		run(t, ops.Softmax(), x, y)
		mx := math.Inf(-1)
		for _, v := range x {
			mx = math.Max(mx, float64(v))
		}
		var s float64
		for _, v := range x {
			s += math.Exp(float64(v) - mx)
		}
		for i, v := range x {
			want := math.Exp(float64(v)-mx) / s
			if math.Abs(float64(y[i])-want) > float64(1e-6*want)+1e-12 {
				t.Fatalf("n=%d [%d]: %v, want %v", n, i, y[i], want)
			}
		}
	}
}

// ropeRef is the rotation written plainly, in float64.
func ropeRef(x []float32, mode, pos, hd, dims int, base, fs float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	for h := 0; h < len(x)/hd; h++ {
		for i := 0; i < dims/2; i++ {
			th := float64(float64(pos) * fs * math.Pow(base, -2*float64(i)/float64(dims)))
			a, b := h*hd+2*i, h*hd+2*i+1
			if mode == dsl.RopeNeox {
				a, b = h*hd+i, h*hd+i+dims/2
			}
			x0, x1 := float64(x[a]), float64(x[b])
			y[a], y[b] = float64(x0*math.Cos(th))-float64(x1*math.Sin(th)), float64(x0*math.Sin(th))+float64(x1*math.Cos(th))
		}
	}
	return y
}

func TestRope(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, mode := range []int{dsl.RopeNormal, dsl.RopeNeox} {
		for _, c := range []struct{ pos, heads, hd, dims int }{{0, 1, 8, 8}, {5, 3, 16, 16}, {97, 2, 64, 32}, {1000, 4, 128, 128}} {
			x := opstest.Floats(c.heads*c.hd, 2, r)
			y := make([]float32, len(x))
			run(t, ops.Rope(mode), x, y, c.pos, c.hd, c.dims, float32(10000), float32(1))
			want := ropeRef(x, mode, c.pos, c.hd, c.dims, 10000, 1)
			// theta is an f32 of size up to pos: its rounding moves the angle by pos·2^-24
			tol := 4e-6 * float64(c.pos+1)
			for i := range y {
				if math.Abs(float64(y[i])-want[i]) > tol {
					t.Fatalf("mode %d %+v [%d]: %v, want %v", mode, c, i, y[i], want[i])
				}
			}
			// in place gives the same bits
			z := append([]float32(nil), x...)
			run(t, ops.Rope(mode), z, z, c.pos, c.hd, c.dims, float32(10000), float32(1))
			sameBits(t, "rope in place", z, y)
		}
	}
}
