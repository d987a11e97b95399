package gpuexec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// aheadWeights is out random rows of cols columns of device layout typ,
// mats matrices (a SwiGLU's two), in the layout's bytes.
func aheadWeights(t *testing.T, typ string, mats, out, cols int, r *rand.Rand) [][]byte {
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

// stagedShape is sh staging its group's rows of typ (cols columns): the
// shape with Stage set to those rows' bytes.
func stagedShape(t *testing.T, typ string, cols int, sh ops.DotShape) ops.DotShape {
	t.Helper()
	rb, err := quant.RowBytes(opstest.Type(stored(typ)), int64(cols))
	if err != nil {
		t.Fatal(err)
	}
	sh.Stage = sh.Rows * int(rb)
	return sh
}

// Staged mat-vecs copying ahead (ptx.Target.StageAhead) on the device,
// without a dependent launch. Correctness: each type and form, staged in
// groups of two rows a warp, on grids of 1, 2 and 5 CTAs (each CTA walking
// several groups: copies ahead at every iteration, none past the last)
// equals the interpreter. Speed: the 8B's feed-forward and o matrices and
// the 1B's SwiGLU, each in one shape plain (a CTA for every group the CTA
// holds), plain on a grid of every CTA resident at once, staged ahead on
// that grid, on the full grid, and on grids of 2 and 4 CTAs a
// multiprocessor, the weights streamed from a 1 GiB pool as in
// TestGPUMatVecDot (logged, not asserted).
func TestGPUStageAhead(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	if c.Device.Major < 8 {
		t.Skipf("sm_%d%d: cp.async needs sm_80", c.Device.Major, c.Device.Minor)
	}
	r := rand.New(rand.NewPCG(9, 10))
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	tg.StageAhead = true
	for _, tf := range [][2]string{{"Q4_K", ""}, {"Q4_K", "SwiGLU"}, {"Q6_KA", ""}, {"Q8_0", ""}} {
		typ, form := tf[0], tf[1]
		mats, qk, quantize := 1, 256, ops.QuantizeQ8_K()
		if form == "SwiGLU" {
			mats = 2
		}
		if typ == "Q8_0" {
			qk, quantize = 32, ops.QuantizeQ8_0()
		}
		const out = 64
		cols := 1536
		if typ == ops.Q6_KA.Name {
			cols = ops.Q6_KA.QK
		}
		sh := stagedShape(t, typ, cols, ops.DotShape{Rows: 2, Unroll: 2})
		if sh.Stage%16 != 0 {
			t.Fatalf("%s: a group's rows take %d bytes, not whole 16-byte copies", typ, sh.Stage)
		}
		mv := ops.DotMatVec(form, typ, sh)
		src, err := ptx.Module([]*kernel.Kernel{mv}, tg)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(src, "cp.async.wait_group 1") {
			t.Fatalf("%s: not copied ahead", mv.Name)
		}
		mod := loadKernelsFor(t, c, tg, mv)
		fn, err := mod.Function(mv.Name)
		if err != nil {
			t.Fatal(err)
		}
		ws := aheadWeights(t, typ, mats, out, cols, r)
		x := opstest.Floats(cols, 1, r)
		xq, xs := make([]byte, cols), make([]float32, cols/qk)
		if err := kernel.Run(quantize, x, xq, xs); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, out)
		var args []any
		for _, w := range ws {
			args = append(args, w)
		}
		if err := kernel.Run(mv, append(args, xq, xs, want)...); err != nil {
			t.Fatal(err)
		}
		var vals []uint64
		for _, w := range ws {
			d := upload(t, c, w)
			defer d.Free()
			vals = append(vals, d.Ptr, uint64(len(w)))
		}
		xqd, xsd, yd := upload(t, c, xq), upload(t, c, f32Bytes(xs)), zeroed(t, c, 4*out)
		defer func() { xqd.Free(); xsd.Free(); yd.Free() }()
		vals = append(vals, xqd.Ptr, uint64(cols), xsd.Ptr, uint64(cols/qk), yd.Ptr, out)
		a := cuda.NewArgs(len(vals))
		for j, v := range vals {
			a.Set(j, v)
		}
		lp, err := ptx.Plan(mv, tg)
		if err != nil {
			t.Fatal(err)
		}
		if lp.Stages == 0 {
			t.Fatalf("%s: no shared memory planned for its stages", mv.Name)
		}
		if err := allowShared(fn, lp.Stages); err != nil {
			t.Fatal(err)
		}
		for _, grid := range []uint32{1, 2, 5} {
			if err := yd.Zero(); err != nil {
				t.Fatal(err)
			}
			if err := fn.Launch(cuda.Dim3{X: grid, Y: 1, Z: 1}, cuda.Dim3{X: threadsPerBlock, Y: 1, Z: 1}, uint32(lp.Stages), s, a); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 4*out)
			if err := yd.Download(got); err != nil {
				t.Fatal(err)
			}
			for i, g := range f32sFrom(got) {
				if v := want[i]; math.Abs(float64(g-v)) > float64(1e-5*math.Abs(float64(v)))+1e-6 {
					t.Errorf("%s on %d CTAs, row %d: device %v, interpreter %v", mv.Name, grid, i, g, v)
				}
			}
		}
	}
	if t.Failed() {
		return
	}
	timeStageAhead(t, c, s, tg, r)
}

// timeStageAhead is TestGPUStageAhead's speed half.
func timeStageAhead(t *testing.T, c *cuda.Context, s *cuda.Stream, tg ptx.Target, r *rand.Rand) {
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
	cases := []struct {
		model, typ, form string
		out, cols        int
		sh               ops.DotShape
	}{
		{"8B", "Q4_K", "SwiGLU", 14336, 4096, ops.DotShape{Rows: 1, Unroll: 2}},
		{"8B", "Q4_K", "", 4096, 14336, ops.DotShape{Rows: 2, Threads: 128, Unroll: 4}},
		{"8B", "Q6_KA", "", 4096, 14336, ops.DotShape{Rows: 2, Threads: 128, Unroll: 4}},
		{"8B", "Q4_K", "", 4096, 4096, ops.DotShape{Rows: 2, Unroll: 2}},
		{"1B", "Q4_K", "SwiGLU", 8192, 2048, ops.DotShape{Rows: 1, Unroll: 2}},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-4s %-12s %6s %6s | %10s %10s %10s %10s %10s %10s (µs;GB/s)\n", "", "matrix", "rows", "cols", "plain", "resident", "ahead,res", "ahead", "ahead,2/SM", "ahead,4/SM")
	for _, mc := range cases {
		mats := 1
		if mc.form == "SwiGLU" {
			mats = 2
		}
		staged := stagedShape(t, mc.typ, mc.cols, mc.sh)
		plain, ahead := ops.DotMatVec(mc.form, mc.typ, mc.sh), ops.DotMatVec(mc.form, mc.typ, staged)
		quantize := ops.QuantizeQ8_K()
		mod := loadKernelsFor(t, c, tg, quantize, plain, ahead)
		rb, err := quant.RowBytes(opstest.Type(stored(mc.typ)), int64(mc.cols))
		if err != nil {
			t.Fatal(err)
		}
		size := mc.out * int(rb)
		slots := max(1, min(poolBytes/(mats*size), 256))
		x := opstest.Floats(mc.cols, 1, r)
		xd := upload(t, c, f32Bytes(x))
		xqd, xsd, yd := zeroed(t, c, mc.cols), zeroed(t, c, 4*mc.cols/256), zeroed(t, c, 4*mc.out)
		qa := cuda.NewArgs(6)
		for i, v := range []uint64{xd.Ptr, uint64(len(x)), xqd.Ptr, uint64(mc.cols), xsd.Ptr, uint64(mc.cols / 256)} {
			qa.Set(i, v)
		}
		launcher(t, mod, tg, s, quantize, qa, ptx.Elems(len(x)), ptx.Elems(mc.cols), ptx.Elems(mc.cols/256))()
		fmt.Fprintf(&table, "%-4s %-12s %6d %6d |", mc.model, mc.typ+mc.form, mc.out, mc.cols)
		for _, v := range []struct {
			k        *kernel.Kernel
			resident bool
			perSM    int // CTAs a multiprocessor, where set
		}{{plain, false, 0}, {plain, true, 0}, {ahead, true, 0}, {ahead, false, 0}, {ahead, true, 2}, {ahead, true, 4}} {
			fn, err := mod.Function(v.k.Name)
			if err != nil {
				t.Fatal(err)
			}
			var vals []uint64
			var sizes []any
			for m := range mats {
				vals, sizes = append(vals, pd.Ptr+uint64(m*size), uint64(size)), append(sizes, ptx.Elems(size))
			}
			vals = append(vals, xqd.Ptr, uint64(mc.cols), xsd.Ptr, uint64(mc.cols/256), yd.Ptr, uint64(mc.out))
			a := cuda.NewArgs(len(vals))
			for j, x := range vals {
				a.Set(j, x)
			}
			grid, blk, shared, err := launchShape(v.k, tg, append(sizes, ptx.Elems(mc.cols), ptx.Elems(mc.cols/256), ptx.Elems(mc.out))...)
			if err != nil {
				t.Fatal(err)
			}
			if err := allowShared(fn, int(shared)); err != nil {
				t.Fatal(err)
			}
			if v.resident {
				if grid.X, err = residentGrid(fn, c.Device.Multiprocessors, grid.X, blk.X, shared); err != nil {
					t.Fatal(err)
				}
				if v.perSM > 0 {
					grid.X = min(grid.X, uint32(v.perSM*c.Device.Multiprocessors))
				}
			}
			n := 0
			next := func() {
				for m := range mats {
					a.Set(2*m, pd.Ptr+uint64((n%slots*mats+m)*size))
				}
				if err := fn.Launch(grid, blk, shared, s, a); err != nil {
					t.Fatal(err)
				}
				n++
			}
			for range 5 {
				next()
			}
			us := deviceMicros(t, c, s, 50, next)
			fmt.Fprintf(&table, " %5.1f;%4.0f", us, float64(mats*size)/us/1e3)
		}
		table.WriteString("\n")
		for _, b := range []cuda.Buffer{xd, xqd, xsd, yd} {
			b.Free()
		}
	}
	t.Logf("staged mat-vecs copying ahead, µs a launch and GB/s (weights streamed from a 1 GiB pool):\n%s", table.String())
}
