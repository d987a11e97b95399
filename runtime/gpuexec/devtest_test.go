package gpuexec

import (
	"math"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
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
	src, err := ptx.Module(ks, tg)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := c.LoadPTX(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Unload() })
	return mod, tg
}

// launcher is a launch of kernel k of mod on s with args, shaped as
// ptx.Threads gives for sizes (the kernel's buffer lengths and scalars),
// CTAs of threadsPerBlock.
func launcher(t *testing.T, mod *cuda.Module, tg ptx.Target, s *cuda.Stream, k *kernel.Kernel, args *cuda.Args, sizes ...any) func() {
	t.Helper()
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
