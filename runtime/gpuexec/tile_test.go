package gpuexec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// TestGPUMatMulTile checks the tensor-core prefill products on the device:
// DequantF16Q4_K bit for bit, and every MatMulTile and MatMulBlock shape
// within f32 rounding of the interpreter (the hardware's sums run in its
// own order) on a shape with partial tiles, then logs the kernels' times on
// the models' shapes times 512 rows (a prefill step).
func TestGPUMatMulTile(t *testing.T) {
	c, s := tensorCoreStream(t)
	shapes := []*kernel.Kernel{ops.MatMulTile(), ops.MatMulTileShape(4, 4), ops.MatMulTileShape(2, 2)}
	for _, sh := range blockShapes {
		shapes = append(shapes, ops.MatMulBlock(sh, kernel.U16))
	}
	shapes = append(shapes, ops.MatMulBlock(blockShapes[0], kernel.F32))
	checkProducts(t, c, s, ptx.ForDevice(c.Device.Major, c.Device.Minor), shapes)
}

// The prefill products on sm_90a's warpgroup MMA (ptx.Target.WGMMA, the
// runner's with JITLLM_WGMMA=1, and with WGMMAOverlap, =2) against the interpreter and MatMulTile as
// TestGPUMatMulTile checks the mma.sync ones, and their times beside them.
func TestGPUMatMulBlockWGMMA(t *testing.T) {
	c, s := tensorCoreStream(t)
	if c.Device.Major != 9 || c.Device.Minor != 0 {
		t.Skipf("wgmma is sm_90a's; this is sm_%d%d", c.Device.Major, c.Device.Minor)
	}
	shapes := []*kernel.Kernel{ops.MatMulTile()}
	for _, sh := range prefillBlocks {
		shapes = append(shapes, ops.MatMulBlock(sh, kernel.U16), ops.MatMulBlock(sh, kernel.F32))
	}
	for _, overlap := range []bool{false, true} {
		t.Logf("wgmma, a stage's products in flight: %v", overlap)
		checkProducts(t, c, s, ptx.Target{SM: 90, WGMMA: true, WGMMAOverlap: overlap}, shapes)
	}
}

// checkProducts renders DequantF16Q4_K and shapes (shapes[0] MatMulTile,
// the reference) for tg and checks and times them as TestGPUMatMulTile
// says.
func checkProducts(t *testing.T, c *cuda.Context, s *cuda.Stream, tg ptx.Target, shapes []*kernel.Kernel) {
	deq, mmt := ops.DequantF16(ops.Q4_K), shapes[0]
	mod := loadKernelsFor(t, c, tg, append([]*kernel.Kernel{deq}, shapes...)...)
	r := rand.New(rand.NewPCG(5, 6))
	for _, size := range []struct{ n, out, rows int }{{512, 72, 70}, {512, 200, 130}, {2048, 2048, 512}, {2048, 8192, 512}, {8192, 2048, 512},
		{1024, 3072, 512}, {4096, 4096, 512}, {4096, 14336, 512}, {14336, 4096, 512}} {
		var w []byte
		for i := 0; i < size.out; i++ {
			w = append(w, opstest.Row(quant.Q4_K, size.n, nil, r)...)
		}
		x := opstest.Floats(size.rows*size.n, 1, r)
		nw := size.out * size.n
		xh := make([]byte, 2*len(x)) // x as f16 bits, for the kernels taking them
		for i, v := range x {
			h := quant.F32ToF16(v)
			xh[2*i], xh[2*i+1] = byte(h), byte(h>>8)
		}
		wd, xd, xhd := upload(t, c, w), upload(t, c, f32Bytes(x)), upload(t, c, xh)
		whd, err := c.Alloc(uint64(2 * nw))
		if err != nil {
			t.Fatal(err)
		}
		yd, err := c.Alloc(uint64(4 * size.rows * size.out))
		if err != nil {
			t.Fatal(err)
		}
		da := cuda.NewArgs(4)
		da.Set(0, wd.Ptr)
		da.Set(1, uint64(len(w)))
		da.Set(2, whd.Ptr)
		da.Set(3, uint64(nw))
		mmArgs := func(ptr uint64) *cuda.Args {
			a := cuda.NewArgs(7)
			a.Set(0, ptr)
			a.Set(1, uint64(len(x)))
			a.Set(2, whd.Ptr)
			a.Set(3, uint64(nw))
			a.Set(4, yd.Ptr)
			a.Set(5, uint64(size.rows*size.out))
			a.Set(6, uint64(size.n))
			return a
		}
		ma, ma16 := mmArgs(xd.Ptr), mmArgs(xhd.Ptr)
		runDeq := launcher(t, mod, tg, s, deq, da, ptx.Elems(len(w)), ptx.Elems(nw))
		launchMM := func(k *kernel.Kernel) func() {
			a := ma
			if k.Params[0].Buf.Elem == kernel.U16 {
				a = ma16
			}
			return launcher(t, mod, tg, s, k, a, ptx.Elems(len(x)), ptx.Elems(nw), ptx.Elems(size.rows*size.out), size.n)
		}
		runDeq()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if size.rows < 200 {
			gotW := make([]byte, 2*nw)
			if err := whd.Download(gotW); err != nil {
				t.Fatal(err)
			}
			wantW := make([]uint16, nw)
			if err := kernel.Run(deq, w, wantW); err != nil {
				t.Fatal(err)
			}
			for i, h := range wantW {
				if g := uint16(gotW[2*i]) | uint16(gotW[2*i+1])<<8; g != h {
					t.Fatalf("DequantF16Q4_K value %d: device %#04x, interpreter %#04x", i, g, h)
				}
			}
			want := make([]float32, size.rows*size.out)
			if err := kernel.Run(mmt, x, wantW, want, size.n); err != nil {
				t.Fatal(err)
			}
			for _, sh := range shapes {
				checkProduct(t, s, yd, launchMM(sh), want, sh.Name+" against the interpreter")
			}
		} else {
			// the big shapes: every kernel against MatMulTile's result
			launchMM(mmt)()
			got := make([]byte, 4*size.rows*size.out)
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := yd.Download(got); err != nil {
				t.Fatal(err)
			}
			want := f32sFrom(got)
			for _, sh := range shapes[1:] {
				checkProduct(t, s, yd, launchMM(sh), want, fmt.Sprintf("%s %dx%d times %d rows against MatMulTile", sh.Name, size.out, size.n, size.rows))
			}
			us := deviceMicros(t, c, s, 20, runDeq)
			t.Logf("DequantF16Q4_K %dx%d: %.1f µs, %.0f GB/s of f16 weights", size.out, size.n, us, 2*float64(nw)/us/1e3)
			flop := 2 * float64(size.n) * float64(size.out) * float64(size.rows)
			for _, sh := range shapes {
				us := deviceMicros(t, c, s, 20, launchMM(sh))
				t.Logf("%s %dx%d times %d rows: %.1f µs, %.2f TFLOP/s", sh.Name, size.out, size.n, size.rows, us, flop/us/1e6)
			}
		}
		wd.Free()
		xd.Free()
		xhd.Free()
		whd.Free()
		yd.Free()
	}
}

// tensorCoreStream is deviceStream on a device with mma.m16n8k16 (sm_80
// and later); the test skips on others.
func tensorCoreStream(t *testing.T) (*cuda.Context, *cuda.Stream) {
	t.Helper()
	needGPU(t)
	c, s := deviceStream(t)
	if c.Device.Major < 8 {
		t.Skipf("sm_%d%d has no mma.m16n8k16", c.Device.Major, c.Device.Minor)
	}
	return c, s
}

// blockShapes are the MatMulBlock shapes the device test checks and times.
var blockShapes = []kernel.BlockShape{
	{WM: 2, WN: 2, M: 4, N: 8}, {WM: 2, WN: 4, M: 4, N: 4}, {WM: 4, WN: 2, M: 2, N: 8},
	{WM: 2, WN: 2, M: 2, N: 8}, {WM: 2, WN: 2, M: 2, N: 4}, {WM: 2, WN: 4, M: 2, N: 4},
}

// checkProduct runs a product into y (NaN first: it must store every
// element) and checks it is want within f32 rounding of the largest |y|.
func checkProduct(t *testing.T, s *cuda.Stream, y cuda.Buffer, run func(), want []float32, what string) {
	t.Helper()
	if err := y.Upload(f32Bytes(nans(len(want)))); err != nil {
		t.Fatal(err)
	}
	run()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*len(want))
	if err := y.Download(got); err != nil {
		t.Fatal(err)
	}
	worst, scale := 0.0, 0.0
	for i, g := range f32sFrom(got) {
		worst = max(worst, math.Abs(float64(g)-float64(want[i])))
		if math.IsNaN(float64(g)) {
			worst = math.Inf(1)
		}
		scale = max(scale, math.Abs(float64(want[i])))
	}
	t.Logf("%s: within %.3g (max |y| %.3g)", what, worst, scale)
	if worst > 1e-5*scale {
		t.Errorf("%s: differs by %.3g (max |y| %.3g)", what, worst, scale)
	}
}

// nans is n NaNs: a result buffer's state before a kernel must store every element.
func nans(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}
