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
	pd := weightPool(t, c, r)
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
		checkDotShapes(t, c, s, mod, tg, typ, mats, quantize, qk, ks[1:], nil, r)
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
			st := newStreamed(t, c, s, mod, tg, pd, quantize, qk, mats, size, mc.cols, mc.out, r)
			best, bestUs := "", math.Inf(1)
			for si, mv := range ks[1:] {
				if mc.out%shapes[si].Rows != 0 {
					fmt.Fprintf(&table, " %7s", "-")
					continue
				}
				us := st.micros(launcher(t, mod, tg, s, mv, st.args, st.sizes...))
				fmt.Fprintf(&table, " %7.1f", us)
				if us < bestUs {
					best, bestUs = mv.Name, us
				}
			}
			fmt.Fprintf(&table, " | %s %.1f µs %.0f GB/s\n", best, bestUs, float64(mats*size)/bestUs/1e3)
			st.free()
		}
	}
	t.Logf("integer mat-vecs, µs a launch (weights streamed from a 1 GiB pool):\n%s", table.String())
	if f := os.Getenv("GPUEXEC_DOT_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(table.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// randomWeights is out random rows of cols columns of device layout typ,
// mats matrices (a SwiGLU's two), in the layout's bytes.
func randomWeights(t *testing.T, typ string, mats, out, cols int, r *rand.Rand) [][]byte {
	t.Helper()
	ws := make([][]byte, mats)
	for m := range ws {
		for range out {
			ws[m] = append(ws[m], opstest.Row(opstest.Type(stored(typ)), cols, nil, r)...)
		}
		if typ == ops.Q6_KA.Name {
			if err := ops.RepackQ6_KA(ws[m], slices.Clone(ws[m])); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ws
}

// sameSums fails where a mat-vec's device rows got differ from the
// interpreter's want beyond f32 rounding (the same tree, no exps).
func sameSums(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i, g := range got {
		if v := want[i]; math.Abs(float64(g-v)) > float64(1e-5*math.Abs(float64(v)))+1e-6 {
			t.Errorf("%s row %d: device %v, interpreter %v", name, i, g, v)
		}
	}
}

// poolBytes is weightPool's size.
const poolBytes = 1 << 30

// weightPool is a device pool of poolBytes random weight bytes (finite f16
// halves wherever the scales fall) that timed mat-vecs stream from at a
// new offset each launch, as a decode step does: a matrix read again from
// the 50 MB L2 would time the cache.
func weightPool(t *testing.T, c *cuda.Context, r *rand.Rand) cuda.Buffer {
	t.Helper()
	pool := make([]byte, poolBytes)
	for i := 0; i < len(pool); i += 8 {
		v := r.Uint64() &^ 0x4000400040004000
		for j := range 8 {
			pool[i+j] = byte(v >> (8 * j))
		}
	}
	return upload(t, c, pool)
}

// streamed is a timed mat-vec's operands: mats matrices of size bytes
// from a weightPool, a random activation of cols values quantized on the
// device (blocks of qk), an output of out rows; args and sizes are a
// mat-vec's (w…, xq, xd, y), the weights at the pool's start.
type streamed struct {
	t             *testing.T
	c             *cuda.Context
	s             *cuda.Stream
	pool          cuda.Buffer
	mats, size    int
	args          *cuda.Args
	sizes         []any
	xd, xq, xs, y cuda.Buffer
}

func newStreamed(t *testing.T, c *cuda.Context, s *cuda.Stream, mod *cuda.Module, tg ptx.Target, pool cuda.Buffer,
	quantize *kernel.Kernel, qk, mats, size, cols, out int, r *rand.Rand) *streamed {
	t.Helper()
	x := opstest.Floats(cols, 1, r)
	st := &streamed{t: t, c: c, s: s, pool: pool, mats: mats, size: size, xd: upload(t, c, f32Bytes(x)),
		xq: zeroed(t, c, cols), xs: zeroed(t, c, 4*cols/qk), y: zeroed(t, c, 4*out)}
	qa := cuda.NewArgs(6)
	for i, v := range []uint64{st.xd.Ptr, uint64(cols), st.xq.Ptr, uint64(cols), st.xs.Ptr, uint64(cols / qk)} {
		qa.Set(i, v)
	}
	launcher(t, mod, tg, s, quantize, qa, ptx.Elems(cols), ptx.Elems(cols), ptx.Elems(cols/qk))()
	var vals []uint64
	for m := range mats { // a SwiGLU's up matrix right after its gate's
		vals, st.sizes = append(vals, pool.Ptr+uint64(m*size), uint64(size)), append(st.sizes, ptx.Elems(size))
	}
	vals = append(vals, st.xq.Ptr, uint64(cols), st.xs.Ptr, uint64(cols/qk), st.y.Ptr, uint64(out))
	st.sizes = append(st.sizes, ptx.Elems(cols), ptx.Elems(cols/qk), ptx.Elems(out))
	st.args = cuda.NewArgs(len(vals))
	for j, v := range vals {
		st.args.Set(j, v)
	}
	return st
}

// micros is run's mean device time over 50 launches after 5, the weights
// moved to the pool's next slot (offsets a 16-byte multiple apart) before
// each: run launches with st.args, which the launch copies, so one Args
// serves every slot.
func (st *streamed) micros(run func()) float64 {
	slots := max(1, min(poolBytes/(st.mats*st.size), 256))
	n := 0
	next := func() {
		for m := range st.mats {
			st.args.Set(2*m, st.pool.Ptr+uint64((n%slots*st.mats+m)*st.size))
		}
		run()
		n++
	}
	for range 5 {
		next()
	}
	return deviceMicros(st.t, st.c, st.s, 50, next)
}

func (st *streamed) free() {
	for _, b := range []cuda.Buffer{st.xd, st.xq, st.xs, st.y} {
		b.Free()
	}
}

// stored is the GGUF type of a device layout's name (Q6_KA: Q6_K).
func stored(layout string) string {
	if layout == ops.Q6_KA.Name {
		return "Q6_K"
	}
	return layout
}

// dotCheckCols is the columns checkDotShapes gives a matrix of layout typ:
// 6 blocks of 256 (units that do not fill a group evenly), 3 of Q6_KA's.
func dotCheckCols(typ string) int {
	if typ == ops.Q6_KA.Name {
		return 3 * ops.Q6_KA.QK
	}
	return 1536
}

// checkDotShapes runs every shape's kernel (ks, in dotShapes' order, over
// mats matrices) on 64 rows of random quants and compares it with the
// interpreter: on each grid of grids CTAs, or (nil) the launch's own.
func checkDotShapes(t *testing.T, c *cuda.Context, s *cuda.Stream, mod *cuda.Module, tg ptx.Target, typ string, mats int,
	quantize *kernel.Kernel, qk int, ks []*kernel.Kernel, grids []uint32, r *rand.Rand) {
	t.Helper()
	const out = 64
	cols := dotCheckCols(typ)
	ws := randomWeights(t, typ, mats, out, cols, r)
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
		if grids == nil {
			grids = []uint32{0}
		}
		for _, grid := range grids {
			if err := yd.Zero(); err != nil {
				t.Fatal(err)
			}
			launcherOn(t, mod, tg, s, mv, a, grid, append(sizes, ptx.Elems(cols), ptx.Elems(cols/qk), ptx.Elems(out))...)()
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 4*out)
			if err := yd.Download(got); err != nil {
				t.Fatal(err)
			}
			name := mv.Name
			if grid > 0 {
				name = fmt.Sprintf("%s on %d CTAs", mv.Name, grid)
			}
			sameSums(t, name, f32sFrom(got), want)
		}
		names = append(names, mv.Name)
	}
	sort.Strings(names)
	t.Logf("%s equal the interpreter on %d×%d", strings.Join(names, ", "), out, cols)
}
