package gpuexec

import (
	"math"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// The kernel tests' device plumbing: one context and stream, kernels
// loaded as one module, launched at their ptx.Threads shape and timed by
// events.

// deviceStream opens device 0 and a stream, closed when t ends.
func deviceStream(t *testing.T) (*cuda.Context, *cuda.Stream) {
	t.Helper()
	c, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return c, s
}

// loadKernels renders ks for c's device as one module, unloaded when t ends.
func loadKernels(t *testing.T, c *cuda.Context, ks ...*kernel.Kernel) (*cuda.Module, ptx.Target) {
	t.Helper()
	tg := ptx.ForDevice(c.Device.Major, c.Device.Minor)
	return loadKernelsFor(t, c, tg, ks...), tg
}

// loadKernelsFor renders ks for tg as one module on c, unloaded when t ends.
func loadKernelsFor(t *testing.T, c *cuda.Context, tg ptx.Target, ks ...*kernel.Kernel) *cuda.Module {
	t.Helper()
	src, err := ptx.Module(ks, tg)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := c.LoadPTX(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Unload() })
	return mod
}

// launcher is a launch of kernel k of mod on s with args, shaped as
// ptx.Threads gives for sizes (the kernel's buffer lengths and scalars),
// CTAs of threadsPerBlock (of the group, for a group wider than a warp).
func launcher(t *testing.T, mod *cuda.Module, tg ptx.Target, s *cuda.Stream, k *kernel.Kernel, args *cuda.Args, sizes ...any) func() {
	t.Helper()
	return launcherOn(t, mod, tg, s, k, args, 0, sizes...)
}

// launcherOn is launcher on a grid of ctas CTAs (0: the launch's own).
func launcherOn(t *testing.T, mod *cuda.Module, tg ptx.Target, s *cuda.Stream, k *kernel.Kernel, args *cuda.Args, ctas uint32, sizes ...any) func() {
	t.Helper()
	fn, err := mod.Function(k.Name)
	if err != nil {
		t.Fatal(err)
	}
	grid, blk, shared, err := launchShape(k, tg, sizes...)
	if err != nil {
		t.Fatal(err)
	}
	if ctas > 0 {
		grid.X = ctas
	}
	if err := allowShared(fn, int(shared)); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := fn.Launch(grid, blk, shared, s, args); err != nil {
			t.Fatal(err)
		}
	}
}

// deviceMicros is run's mean device time over reps runs back to back,
// between two events on s.
func deviceMicros(t *testing.T, c *cuda.Context, s *cuda.Stream, reps int, run func()) float64 {
	t.Helper()
	e0, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e0.Destroy()
	e1, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Destroy()
	e0.Record(s)
	for range reps {
		run()
	}
	e1.Record(s)
	if err := e1.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ms, err := e1.Since(e0)
	if err != nil {
		t.Fatal(err)
	}
	return 1000 * float64(ms) / float64(reps)
}

// upload copies b to a new device buffer.
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

// zeroed is a new device buffer of n zero bytes.
func zeroed(t *testing.T, c *cuda.Context, n int) cuda.Buffer {
	t.Helper()
	d, err := c.Alloc(uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Zero(); err != nil {
		t.Fatal(err)
	}
	return d
}

// u16Bytes is v little-endian.
func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		b[2*i], b[2*i+1] = byte(x), byte(x>>8)
	}
	return b
}

// f32sFrom reads little-endian f32s from bytes downloaded from the device.
func f32sFrom(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return v
}

// attnBufs are the device buffers of a decode-attention launch pair: the
// query rows, the f16 caches, AttentionSplit's pieces and scores, the step
// and the output, with their lengths in elements.
type attnBufs struct {
	q, kc, vc, part, step, sc, y cuda.Buffer
	nq, nkc, nvc, np, ns         int
}

// attnSplitMerge are launches of AttentionSplit then AttentionMerge (split,
// merge of mod, either as built or specialized: the scalars they still
// take are set by name) over b for heads of hd dimensions in groups of
// group, kv rows dim wide, ctx cache rows, chunks pieces a pair.
func attnSplitMerge(t *testing.T, mod *cuda.Module, tg ptx.Target, s *cuda.Stream, split, merge *kernel.Kernel, b attnBufs,
	hd, heads, group, dim, ctx, chunks int, scale float32) (runSplit, runMerge func()) {
	t.Helper()
	type buf struct {
		p cuda.Buffer
		n int
	}
	scalars := map[string]any{"headDim": hd, "heads": heads, "group": group, "kvDim": dim, "ctx": ctx, "chunks": chunks, "scale": scale}
	launch := func(k *kernel.Kernel, bufs []buf) func() {
		a := cuda.NewArgs(2 * len(k.Params))
		var sizes []any
		slot, bi := 0, 0
		for _, prm := range k.Params {
			if prm.Buf != nil {
				a.Set(slot, bufs[bi].p.Ptr)
				a.Set(slot+1, uint64(bufs[bi].n))
				sizes = append(sizes, ptx.Elems(bufs[bi].n))
				slot, bi = slot+2, bi+1
				continue
			}
			switch v := scalars[prm.Var.Name].(type) {
			case int:
				a.Set(slot, uint64(v))
			case float32:
				a.SetF32(slot, v)
			default:
				t.Fatalf("%s: no value for %s", k.Name, prm.Var.Name)
			}
			sizes = append(sizes, scalars[prm.Var.Name])
			slot++
		}
		return launcher(t, mod, tg, s, k, a, sizes...)
	}
	runSplit = launch(split, []buf{{b.q, b.nq}, {b.kc, b.nkc}, {b.vc, b.nvc}, {b.part, b.np}, {b.step, 2}, {b.sc, b.ns}})
	runMerge = launch(merge, []buf{{b.part, b.np}, {b.step, 2}, {b.y, b.nq}})
	return runSplit, runMerge
}

// attnError is the largest difference between the attention output on
// the device (yd, as many values as q) and the float64 reference at
// position pos; +Inf where the device gave a NaN.
func attnError(t *testing.T, yd cuda.Buffer, q []float32, kc, vc []uint16, pos, hd, heads, group, dim int, scale float32) float64 {
	t.Helper()
	got := make([]byte, 4*len(q))
	if err := yd.Download(got); err != nil {
		t.Fatal(err)
	}
	want := opstest.AttentionRef(q, kc, vc, pos, hd, heads, group, dim, scale)
	var worst float64
	for i, g := range f32sFrom(got) {
		worst = math.Max(worst, math.Abs(float64(g)-want[i]))
		if math.IsNaN(float64(g)) {
			worst = math.Inf(1)
		}
	}
	return worst
}
