package gpuexec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// TestGPUMatVecDot checks the integer decode mat-vecs (1, 2, 4 and 8 weight
// rows a warp) on the device against the interpreter (within f32 rounding: the warp's float order is the same,
// the exps absent, so a few ulps) and logs each one's bandwidth on the 1B
// and 0.6B models' shapes, launches back to back timed by events (a lone
// launch in a graph costs a few µs more).
func TestGPUMatVecDot(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct {
		typ       string
		out, cols int
	}{{"Q4_K", 64, 512}, {"Q6_K", 64, 512}, {"Q8_0", 64, 512},
		{"Q4_K", 2048, 2048}, {"Q4_K", 8192, 2048}, {"Q6_K", 2048, 8192}, {"Q6_K", 128256, 2048},
		{"Q8_0", 1024, 1024}, {"Q8_0", 3072, 1024}, {"Q8_0", 151936, 1024}} {
		quantize, qk := ops.QuantizeQ8_K(), 256
		if sh.typ == "Q8_0" {
			quantize, qk = ops.QuantizeQ8_0(), 32
		}
		for _, rpw := range []int{1, 2, 4, 8} {
			mv := ops.DotMatVecsRows("", rpw)[sh.typ]()
			mod, tg := loadKernels(t, c, quantize, mv)
			typ := opstest.Type(sh.typ)
			row := opstest.Row(typ, sh.cols, nil, r)
			w := make([]byte, 0, sh.out*len(row))
			for i := 0; i < sh.out; i++ {
				if i < 64 {
					row = opstest.Row(typ, sh.cols, nil, r)
				}
				w = append(w, row...) // large shapes repeat rows: speed does not depend on values
			}
			x := opstest.Floats(sh.cols, 1, r)
			wd, xd := upload(t, c, w), upload(t, c, f32Bytes(x))
			xqd, err := c.Alloc(uint64(sh.cols))
			if err != nil {
				t.Fatal(err)
			}
			xsd, err := c.Alloc(uint64(4 * sh.cols / qk))
			if err != nil {
				t.Fatal(err)
			}
			yd, err := c.Alloc(uint64(4 * sh.out))
			if err != nil {
				t.Fatal(err)
			}
			qa := cuda.NewArgs(6)
			qa.Set(0, xd.Ptr)
			qa.Set(1, uint64(len(x)))
			qa.Set(2, xqd.Ptr)
			qa.Set(3, uint64(sh.cols))
			qa.Set(4, xsd.Ptr)
			qa.Set(5, uint64(sh.cols/qk))
			ma := cuda.NewArgs(8)
			ma.Set(0, wd.Ptr)
			ma.Set(1, uint64(len(w)))
			ma.Set(2, xqd.Ptr)
			ma.Set(3, uint64(sh.cols))
			ma.Set(4, xsd.Ptr)
			ma.Set(5, uint64(sh.cols/qk))
			ma.Set(6, yd.Ptr)
			ma.Set(7, uint64(sh.out))
			runQ := launcher(t, mod, tg, s, quantize, qa, ptx.Elems(len(x)), ptx.Elems(sh.cols), ptx.Elems(sh.cols/qk))
			runM := launcher(t, mod, tg, s, mv, ma, ptx.Elems(len(w)), ptx.Elems(sh.cols), ptx.Elems(sh.cols/qk), ptx.Elems(sh.out))
			runQ()
			runM()
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if sh.out <= 64 {
				xq, xs := make([]byte, sh.cols), make([]float32, sh.cols/qk)
				if err := kernel.Run(quantize, x, xq, xs); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, sh.out)
				if err := kernel.Run(mv, w, xq, xs, want); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 4*sh.out)
				if err := yd.Download(got); err != nil {
					t.Fatal(err)
				}
				for i, g := range f32sFrom(got) {
					if v := want[i]; math.Abs(float64(g-v)) > float64(1e-5*math.Abs(float64(v)))+1e-6 {
						t.Errorf("%s row %d: device %v, interpreter %v", mv.Name, i, g, v)
					}
				}
			} else {
				us := deviceMicros(t, c, s, 50, runM)
				t.Logf("%s %dx%d (%.1f MB): %.1f µs, %.0f GB/s", mv.Name, sh.out, sh.cols, float64(len(w))/1e6, us, float64(len(w))/us/1e3)
			}
			for _, b := range []cuda.Buffer{wd, xd, xqd, xsd, yd} {
				b.Free()
			}
		}
	}
}
