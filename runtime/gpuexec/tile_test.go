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
	c, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Device.Major < 8 {
		t.Skipf("sm_%d%d has no mma.m16n8k16", c.Device.Major, c.Device.Minor)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	deq, mmt := ops.DequantF16(ops.Q4_K), ops.MatMulTile()
	shapes := []*kernel.Kernel{mmt, ops.MatMulTileShape(2, 4), ops.MatMulTileShape(4, 2), ops.MatMulTileShape(2, 2), ops.MatMulTileShape(1, 4)}
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	src, err := ptx.Module(append([]*kernel.Kernel{deq}, shapes...), tg)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := c.LoadPTX(src)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	launch := func(k *kernel.Kernel, args *cuda.Args, sizes ...any) func() {
		fn, err := mod.Function(k.Name)
		if err != nil {
			t.Fatal(err)
		}
		th, err := ptx.Threads(k, tg, sizes...)
		if err != nil {
			t.Fatal(err)
		}
		block := min(th, threadsPerBlock)
		grid, blk := cuda.Dim3{X: uint32((th + block - 1) / block), Y: 1, Z: 1}, cuda.Dim3{X: uint32(block), Y: 1, Z: 1}
		return func() {
			if err := fn.Launch(grid, blk, 0, s, args); err != nil {
				t.Fatal(err)
			}
		}
	}
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
		runDeq := launch(deq, da, ptx.Elems(len(w)), ptx.Elems(nw))
		launchMM := func(k *kernel.Kernel) func() {
			return launch(k, ma, ptx.Elems(len(x)), ptx.Elems(nw), ptx.Elems(size.rows*size.out), size.n)
		}
		runMM := launchMM(mmt)
		runDeq()
		runMM()
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
			for i, v := range want {
				g := math.Float32frombits(uint32(got[4*i]) | uint32(got[4*i+1])<<8 | uint32(got[4*i+2])<<16 | uint32(got[4*i+3])<<24)
				worst = max(worst, math.Abs(float64(g)-float64(v)))
				scale = max(scale, math.Abs(float64(v)))
			}
			t.Logf("MatMulTile %dx%d times %d rows: device within %.3g of the interpreter (max |y| %.3g)", size.out, size.n, size.rows, worst, scale)
			if worst > 1e-5*scale || math.IsNaN(worst) {
				t.Errorf("MatMulTile: the device differs from the interpreter by %.3g (max |y| %.3g)", worst, scale)
			}
		} else {
			type timed struct {
				name string
				run  func()
				flop float64
			}
			ks := []timed{{"DequantF16Q4_K", runDeq, 0}}
			for _, sh := range shapes {
				ks = append(ks, timed{sh.Name, launchMM(sh), 2 * float64(size.n) * float64(size.out) * float64(size.rows)})
			}
			for _, k := range ks {
				e0, _ := c.NewEvent()
				e1, _ := c.NewEvent()
				const reps = 20
				e0.Record(s)
				for range reps {
					k.run()
				}
				e1.Record(s)
				if err := e1.Synchronize(); err != nil {
					t.Fatal(err)
				}
				ms, _ := e1.Since(e0)
				us := 1000 * float64(ms) / reps
				t.Logf("%s %dx%d times %d rows: %.1f µs, %.2f TFLOP/s, %.0f GB/s of f16 weights", k.name, size.out, size.n, size.rows, us, k.flop/us/1e6, 2*float64(nw)/us/1e3)
				e0.Destroy()
				e1.Destroy()
			}
		}
		wd.Free()
		xd.Free()
		whd.Free()
		yd.Free()
	}
}

func upload(t *testing.T, c *cuda.Context, b []byte) cuda.Buffer {
	t.Helper()
	d, err := c.Alloc(uint64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(b); err != nil {
		t.Fatal(err)
	}
	return d
}
