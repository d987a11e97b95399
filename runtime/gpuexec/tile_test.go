package gpuexec

import (
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

// TestGPUMatMulTile checks the tensor-core prefill product on the device:
// DequantF16Q4_K bit for bit and MatMulTile within f32 rounding of the
// interpreter (the hardware's sums run in its own order) on a shape with
// partial tiles, then logs both kernels' times on the 1B model's shapes
// times 512 rows (a prefill step).
func TestGPUMatMulTile(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	if c.Device.Major < 8 {
		t.Skipf("sm_%d%d has no mma.m16n8k16", c.Device.Major, c.Device.Minor)
	}
	deq, mmt := ops.DequantF16(ops.Q4_K), ops.MatMulTile()
	shapes := []*kernel.Kernel{mmt, ops.MatMulTileShape(4, 4), ops.MatMulTileShape(4, 2), ops.MatMulTileShape(2, 2), ops.MatMulTileShape(1, 4)}
	mod, tg := loadKernels(t, c, append([]*kernel.Kernel{deq}, shapes...)...)
	r := rand.New(rand.NewPCG(5, 6))
	for _, size := range []struct{ n, out, rows int }{{512, 72, 70}, {2048, 2048, 512}, {2048, 8192, 512}, {8192, 2048, 512}} {
		var w []byte
		for i := 0; i < size.out; i++ {
			w = append(w, opstest.Row(quant.Q4_K, size.n, nil, r)...)
		}
		x := opstest.Floats(size.rows*size.n, 1, r)
		nw := size.out * size.n
		wd, xd := upload(t, c, w), upload(t, c, f32Bytes(x))
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
		ma := cuda.NewArgs(7)
		ma.Set(0, xd.Ptr)
		ma.Set(1, uint64(len(x)))
		ma.Set(2, whd.Ptr)
		ma.Set(3, uint64(nw))
		ma.Set(4, yd.Ptr)
		ma.Set(5, uint64(size.rows*size.out))
		ma.Set(6, uint64(size.n))
		runDeq := launcher(t, mod, tg, s, deq, da, ptx.Elems(len(w)), ptx.Elems(nw))
		launchMM := func(k *kernel.Kernel) func() {
			return launcher(t, mod, tg, s, k, ma, ptx.Elems(len(x)), ptx.Elems(nw), ptx.Elems(size.rows*size.out), size.n)
		}
		runDeq()
		launchMM(mmt)()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if size.rows < 100 {
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
			got := make([]byte, 4*size.rows*size.out)
			if err := yd.Download(got); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, size.rows*size.out)
			if err := kernel.Run(mmt, x, wantW, want, size.n); err != nil {
				t.Fatal(err)
			}
			worst, scale := 0.0, 0.0
			for i, g := range f32sFrom(got) {
				worst = max(worst, math.Abs(float64(g)-float64(want[i])))
				scale = max(scale, math.Abs(float64(want[i])))
			}
			t.Logf("MatMulTile %dx%d times %d rows: device within %.3g of the interpreter (max |y| %.3g)", size.out, size.n, size.rows, worst, scale)
			if worst > 1e-5*scale || math.IsNaN(worst) {
				t.Errorf("MatMulTile: the device differs from the interpreter by %.3g (max |y| %.3g)", worst, scale)
			}
		} else {
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
		whd.Free()
		yd.Free()
	}
}
