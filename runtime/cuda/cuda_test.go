package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// needGPU skips a test, saying why, where no CUDA device can be used.
func needGPU(t *testing.T) *Context {
	t.Helper()
	if err := Load(); err != nil {
		t.Skipf("no GPU here: %v", err)
	}
	c, err := Open(0)
	if err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNoDriverIsAClearError(t *testing.T) {
	err := Load()
	if err == nil {
		t.Skip("a CUDA driver is present")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("want ErrNoDriver, got %v", err)
	}
}

// saxpyPTX is test data for the driver bindings: y = a*x + y over n floats.
const saxpyPTX = `
.version 7.0
.target sm_70
.address_size 64
.visible .entry saxpy(.param .u64 px, .param .u64 py, .param .f32 a, .param .u32 n)
{
	.reg .pred %p;
	.reg .b32 %r<5>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [px];
	ld.param.u64 %rd2, [py];
	ld.param.f32 %f1, [a];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r2, %r2, %r3, %r4;
	setp.ge.u32 %p, %r2, %r1;
	@%p bra DONE;
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	mul.wide.u32 %rd3, %r2, 4;
	add.s64 %rd4, %rd1, %rd3;
	add.s64 %rd5, %rd2, %rd3;
	ld.global.f32 %f2, [%rd4];
	ld.global.f32 %f3, [%rd5];
	fma.rn.f32 %f3, %f1, %f2, %f3;
	st.global.f32 [%rd5], %f3;
DONE:
	ret;
}
`

// saxpy loads saxpyPTX on c, unloaded when the test ends.
func saxpy(t *testing.T, c *Context) *Function {
	t.Helper()
	m, err := c.LoadPTX(saxpyPTX)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unload() })
	f, err := m.Function("saxpy")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func TestLaunchGraphAndEvents(t *testing.T) {
	c := needGPU(t)
	t.Logf("%s, sm_%d%d, %d SMs, %.1f GiB", c.Device.Name, c.Device.Major, c.Device.Minor, c.Device.Multiprocessors, float64(c.Device.TotalMemory)/(1<<30))
	f := saxpy(t, c)
	const n = 1 << 20
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), 1
	}
	dx, _ := c.Alloc(4 * n)
	dy, _ := c.Alloc(4 * n)
	defer dx.Free()
	defer dy.Free()
	if err := dx.Upload(f32bytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := dy.Upload(f32bytes(y)); err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	a := NewArgs(4)
	a.Set(0, dx.Ptr)
	a.Set(1, dy.Ptr)
	a.SetF32(2, 2)
	a.Set(3, n)
	grid, block := Dim3{n / 256, 1, 1}, Dim3{256, 1, 1}
	if err := f.Launch(grid, block, 0, s, a); err != nil {
		t.Fatal(err)
	}
	// The same launch captured into a graph and replayed twice.
	g, err := s.Capture(func() error { return f.Launch(grid, block, 0, s, a) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	start, _ := c.NewEvent()
	end, _ := c.NewEvent()
	start.Record(s)
	for i := 0; i < 2; i++ {
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
	}
	end.Record(s)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ms, err := end.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4*n)
	if err := dy.Download(out); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 4099 {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
		if want := 1 + 3*2*float32(i); got != want {
			t.Fatalf("y[%d] = %g, want %g", i, got, want)
		}
	}
	free, total, _ := c.MemInfo()
	t.Logf("two graph replays %.3f ms; %d of %d MiB free", ms, free>>20, total>>20)
}

// A second stream forked from a captured one (Stream.Wait on an event
// recorded there) and joined back before the capture ends: the graph holds
// both branches, each launch's result as if run on one stream.
func TestCaptureForkJoin(t *testing.T) {
	c := needGPU(t)
	f := saxpy(t, c)
	const n = 1 << 20
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	var bufs [3]Buffer // x, y on the main stream, z on the side
	var err error
	for i := range bufs {
		if bufs[i], err = c.Alloc(4 * n); err != nil {
			t.Fatal(err)
		}
		defer bufs[i].Free()
		if err := bufs[i].Upload(f32bytes(ones)); err != nil {
			t.Fatal(err)
		}
	}
	var streams [2]*Stream
	for i := range streams {
		if streams[i], err = c.NewStream(); err != nil {
			t.Fatal(err)
		}
		defer streams[i].Destroy()
	}
	s, side := streams[0], streams[1]
	ev, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	args := func(x, y Buffer, k float32) *Args {
		a := NewArgs(4)
		a.Set(0, x.Ptr)
		a.Set(1, y.Ptr)
		a.SetF32(2, k)
		a.Set(3, n)
		return a
	}
	grid, block := Dim3{n / 256, 1, 1}, Dim3{256, 1, 1}
	// y += 2x; then on the side z += 3y (after the fork: y = 3); y += 2x again
	g, err := s.Capture(func() error {
		if err := f.Launch(grid, block, 0, s, args(bufs[0], bufs[1], 2)); err != nil {
			return err
		}
		if err := ev.Record(s); err != nil {
			return err
		}
		if err := side.Wait(ev); err != nil {
			return err
		}
		if err := f.Launch(grid, block, 0, side, args(bufs[1], bufs[2], 3)); err != nil {
			return err
		}
		if err := ev.Record(side); err != nil {
			return err
		}
		if err := f.Launch(grid, block, 0, s, args(bufs[0], bufs[0], 0)); err != nil { // x += 0·x: on the main branch beside the side's
			return err
		}
		return s.Wait(ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	if err := g.Launch(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float32{1, 3, 10} {
		out := make([]byte, 4*n)
		if err := bufs[i].Download(out); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < n; j += 4099 {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*j:])); got != want {
				t.Fatalf("buffer %d [%d] = %g, want %g", i, j, got, want)
			}
		}
	}
}

func TestBadPTXReportsLog(t *testing.T) {
	c := needGPU(t)
	_, err := c.LoadPTX(".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry k() { bogus; }")
	if err == nil {
		t.Fatal("bad PTX accepted")
	}
	t.Log(err)
}

// A slice of a buffer is its bytes from an offset, clipped to the buffer.
func TestBufferSlice(t *testing.T) {
	b := Buffer{Ptr: 4096, Size: 100}
	for _, c := range []struct{ off, n, ptr, size uint64 }{{0, 100, 4096, 100}, {16, 32, 4112, 32}, {90, 32, 4186, 10}, {200, 8, 4196, 0}} {
		if s := b.Slice(c.off, c.n); s.Ptr != c.ptr || s.Size != c.size {
			t.Errorf("Slice(%d, %d) = %d+%d, want %d+%d", c.off, c.n, s.Ptr, s.Size, c.ptr, c.size)
		}
	}
}
