package gpuexec

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
)

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
		sh := stagedShape(t, typ, dotCheckCols(typ), ops.DotShape{Rows: 2, Unroll: 2})
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
		if lp, err := ptx.Plan(mv, tg); err != nil || lp.Stages == 0 {
			t.Fatalf("%s: no shared memory planned for its stages (%v)", mv.Name, err)
		}
		mod := loadKernelsFor(t, c, tg, mv)
		checkDotShapes(t, c, s, mod, tg, typ, mats, quantize, qk, []*kernel.Kernel{mv}, []uint32{1, 2, 5}, r)
	}
	if t.Failed() {
		return
	}
	timeStageAhead(t, c, s, tg, r)
}

// timeStageAhead is TestGPUStageAhead's speed half.
func timeStageAhead(t *testing.T, c *cuda.Context, s *cuda.Stream, tg ptx.Target, r *rand.Rand) {
	pd := weightPool(t, c, r)
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
		st := newStreamed(t, c, s, mod, tg, pd, quantize, 256, mats, size, mc.cols, mc.out, r)
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
			grid, blk, shared, err := launchShape(v.k, tg, st.sizes...)
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
			us := st.micros(func() {
				if err := fn.Launch(grid, blk, shared, s, st.args); err != nil {
					t.Fatal(err)
				}
			})
			fmt.Fprintf(&table, " %5.1f;%4.0f", us, float64(mats*size)/us/1e3)
		}
		table.WriteString("\n")
		st.free()
	}
	t.Logf("staged mat-vecs copying ahead, µs a launch and GB/s (weights streamed from a 1 GiB pool):\n%s", table.String())
}
