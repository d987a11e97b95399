package gpuexec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// dotShapes are the integer mat-vec shapes TestGPUMatVecDot checks and
// times: rows a group, threads a group, units a thread's trip.
func dotShapes() []ops.DotShape {
	var out []ops.DotShape
	for _, th := range []int{32, 64, 128} {
		for _, rows := range []int{1, 2, 4, 8} {
			for _, u := range []int{1, 2, 4} {
				out = append(out, ops.DotShape{Rows: rows, Threads: th, Unroll: u})
			}
		}
	}
	return out
}

// matVecCase is one matrix of the models' decode steps (two, gate and
// up, for the SwiGLU form).
type matVecCase struct {
	model, typ string
	out, cols  int
	form       string
}

var matVecCases = []matVecCase{
	{"1B", "Q4_K", 2048, 2048, ""}, {"1B", "Q4_K", 512, 2048, ""}, {"1B", "Q6_K", 512, 2048, ""}, {"1B", "Q4_K", 8192, 2048, ""},
	{"1B", "Q6_K", 2048, 8192, ""}, {"1B", "Q6_K", 128256, 2048, ""},
	{"8B", "Q4_K", 4096, 4096, ""}, {"8B", "Q4_K", 1024, 4096, ""}, {"8B", "Q6_K", 1024, 4096, ""}, {"8B", "Q4_K", 14336, 4096, ""},
	{"8B", "Q6_K", 4096, 14336, ""}, {"8B", "Q4_K", 4096, 14336, ""}, {"8B", "Q6_K", 128256, 4096, ""},
	{"0.6B", "Q8_0", 2048, 1024, ""}, {"0.6B", "Q8_0", 1024, 1024, ""}, {"0.6B", "Q8_0", 1024, 2048, ""}, {"0.6B", "Q8_0", 3072, 1024, ""},
	{"0.6B", "Q8_0", 1024, 3072, ""}, {"0.6B", "Q8_0", 151936, 1024, ""},
	{"1B", "Q4_K", 8192, 2048, "SwiGLU"}, {"8B", "Q4_K", 14336, 4096, "SwiGLU"}, {"0.6B", "Q8_0", 3072, 1024, "SwiGLU"},
}

// TestGPUMatVecDot checks every shape of the integer decode mat-vecs
// (dotShapes) on the device against the interpreter (within f32 rounding:
// the same tree, no exps) and times each on the three models' matrices.
// The weights are read from a 1 GiB pool at a new offset each launch, as a
// decode step streams them (50 launches back to back, events): a matrix
// read again from the 50 MB L2 would time the cache. GPUEXEC_DOT_OUT names
// a file for the table; GPUEXEC_DOT_MODELS ("8B,1B") narrows its models.
func TestGPUMatVecDot(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	r := rand.New(rand.NewPCG(7, 8))
	shapes := dotShapes()
	const poolBytes = 1 << 30
	pool := make([]byte, poolBytes)
	for i := 0; i < len(pool); i += 8 {
		v := r.Uint64() &^ 0x4000400040004000 // finite halves wherever the scales fall
		for j := range 8 {
			pool[i+j] = byte(v >> (8 * j))
		}
	}
	pd := upload(t, c, pool)
	defer pd.Free()
	var table strings.Builder
	fmt.Fprintf(&table, "%-5s %-5s %7s %6s |", "model", "type", "rows", "cols")
	for _, sh := range shapes {
		fmt.Fprintf(&table, " %7s", "x"+fmt.Sprint(sh.Rows)+"t"+fmt.Sprint(sh.Threads)+"u"+fmt.Sprint(sh.Unroll))
	}
	table.WriteString(" | best\n")
	for _, tf := range [][2]string{{"Q4_K", ""}, {"Q6_K", ""}, {"Q6_KA", ""}, {"Q8_0", ""}, {"Q4_K", "SwiGLU"}, {"Q8_0", "SwiGLU"}} {
		typ, form := tf[0], tf[1]
		mats := 1
		if form == "SwiGLU" {
			mats = 2
		}
		ks := make([]*kernel.Kernel, 0, len(shapes)+1)
		quantize, qk := ops.QuantizeQ8_K(), 256
		if typ == "Q8_0" {
			quantize, qk = ops.QuantizeQ8_0(), 32
		}
		ks = append(ks, quantize)
		for _, sh := range shapes {
			ks = append(ks, ops.DotMatVec(form, typ, sh))
		}
		mod, tg := loadKernels(t, c, ks...)
		checkDotShapes(t, c, s, mod, tg, typ, mats, quantize, qk, ks[1:], r)
		for _, mc := range matVecCases {
			// a case of the type, or of the GGUF type whose layout it is
			if mc.form != form || (mc.typ != typ && deviceLayout(opstest.Type(mc.typ), mc.cols) != typ) {
				continue
			}
			if only := os.Getenv("GPUEXEC_DOT_MODELS"); only != "" && !slices.Contains(strings.Split(only, ","), mc.model) {
				continue
			}
			fmt.Fprintf(&table, "%-5s %-5s %7d %6d |", mc.model, typ+mc.form, mc.out, mc.cols)
			rowBytes, err := quant.RowBytes(opstest.Type(stored(typ)), int64(mc.cols))
			if err != nil {
				t.Fatal(err)
			}
			size := mc.out * int(rowBytes)
			x := opstest.Floats(mc.cols, 1, r)
			xd := upload(t, c, f32Bytes(x))
			xqd, xsd, yd := zeroed(t, c, mc.cols), zeroed(t, c, 4*mc.cols/qk), zeroed(t, c, 4*mc.out)
			qa := cuda.NewArgs(6)
			for i, v := range []uint64{xd.Ptr, uint64(len(x)), xqd.Ptr, uint64(mc.cols), xsd.Ptr, uint64(mc.cols / qk)} {
				qa.Set(i, v)
			}
			launcher(t, mod, tg, s, quantize, qa, ptx.Elems(len(x)), ptx.Elems(mc.cols), ptx.Elems(mc.cols/qk))()
			// offsets a 16-byte multiple apart, cycling through the pool
			slots := max(1, min(poolBytes/(mats*size), 256))
			best, bestUs := "", math.Inf(1)
			for si, mv := range ks[1:] {
				if mc.out%shapes[si].Rows != 0 {
					fmt.Fprintf(&table, " %7s", "-")
					continue
				}
				var vals, sizes []any
				for m := range mats { // a SwiGLU's up matrix right after its gate's
					vals, sizes = append(vals, pd.Ptr+uint64(m*size), size), append(sizes, ptx.Elems(size))
				}
				vals = append(vals, xqd.Ptr, mc.cols, xsd.Ptr, mc.cols/qk, yd.Ptr, mc.out)
				a := cuda.NewArgs(len(vals))
				for j, v := range vals {
					if p, ok := v.(uint64); ok {
						a.Set(j, p)
					} else {
						a.Set(j, uint64(v.(int)))
					}
				}
				run := launcher(t, mod, tg, s, mv, a, append(sizes, ptx.Elems(mc.cols), ptx.Elems(mc.cols/qk), ptx.Elems(mc.out))...)
				n := 0
				next := func() { // the launch copies its arguments, so one Args serves every slot
					for m := range mats {
						a.Set(2*m, pd.Ptr+uint64((n%slots*mats+m)*size))
					}
					run()
					n++
				}
				for range 5 {
					next()
				}
				us := deviceMicros(t, c, s, 50, next)
				fmt.Fprintf(&table, " %7.1f", us)
				if us < bestUs {
					best, bestUs = mv.Name, us
				}
			}
			fmt.Fprintf(&table, " | %s %.1f µs %.0f GB/s\n", best, bestUs, float64(mats*size)/bestUs/1e3)
			for _, b := range []cuda.Buffer{xd, xqd, xsd, yd} {
				b.Free()
			}
		}
	}
	t.Logf("integer mat-vecs, µs a launch (weights streamed from a 1 GiB pool):\n%s", table.String())
	if f := os.Getenv("GPUEXEC_DOT_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(table.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// stored is the GGUF type of a device layout's name (Q6_KA: Q6_K).
func stored(layout string) string {
	if layout == ops.Q6_KA.Name {
		return "Q6_K"
	}
	return layout
}

// checkDotShapes runs every shape's kernel (ks, in dotShapes' order, over
// mats matrices) on 64 rows of random quants and compares it with the
// interpreter.
func checkDotShapes(t *testing.T, c *cuda.Context, s *cuda.Stream, mod *cuda.Module, tg ptx.Target, typ string, mats int,
	quantize *kernel.Kernel, qk int, ks []*kernel.Kernel, r *rand.Rand) {
	t.Helper()
	const out = 64
	cols := 1536 // 6 blocks of 256: units that do not fill the group evenly
	if typ == ops.Q6_KA.Name {
		cols = 3 * ops.Q6_KA.QK
	}
	tq := opstest.Type(stored(typ))
	ws := make([][]byte, mats)
	for m := range ws {
		for range out {
			ws[m] = append(ws[m], opstest.Row(tq, cols, nil, r)...)
		}
		if typ == ops.Q6_KA.Name {
			if err := ops.RepackQ6_KA(ws[m], slices.Clone(ws[m])); err != nil {
				t.Fatal(err)
			}
		}
	}
	x := opstest.Floats(cols, 1, r)
	xq, xs := make([]byte, cols), make([]float32, cols/qk)
	if err := kernel.Run(quantize, x, xq, xs); err != nil {
		t.Fatal(err)
	}
	bufs := []cuda.Buffer{upload(t, c, xq), upload(t, c, f32Bytes(xs)), zeroed(t, c, 4*out)}
	var args, sizes []any
	var vals []uint64
	for _, w := range ws {
		d := upload(t, c, w)
		bufs = append(bufs, d)
		args, sizes, vals = append(args, w), append(sizes, ptx.Elems(len(w))), append(vals, d.Ptr, uint64(len(w)))
	}
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	yd := bufs[2]
	vals = append(vals, bufs[0].Ptr, uint64(cols), bufs[1].Ptr, uint64(cols/qk), yd.Ptr, out)
	a := cuda.NewArgs(len(vals))
	for j, v := range vals {
		a.Set(j, v)
	}
	var names []string
	for _, mv := range ks {
		want := make([]float32, out)
		if err := kernel.Run(mv, append(args, xq, xs, want)...); err != nil {
			t.Fatal(err)
		}
		if err := yd.Zero(); err != nil {
			t.Fatal(err)
		}
		launcher(t, mod, tg, s, mv, a, append(sizes, ptx.Elems(cols), ptx.Elems(cols/qk), ptx.Elems(out))...)()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4*out)
		if err := yd.Download(got); err != nil {
			t.Fatal(err)
		}
		for i, g := range f32sFrom(got) {
			if v := want[i]; math.Abs(float64(g-v)) > float64(1e-5*math.Abs(float64(v)))+1e-6 {
				t.Errorf("%s row %d: device %v, interpreter %v", mv.Name, i, g, v)
			}
		}
		names = append(names, mv.Name)
	}
	sort.Strings(names)
	t.Logf("%s equal the interpreter on %d×%d", strings.Join(names, ", "), out, cols)
}
