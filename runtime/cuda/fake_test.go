package cuda_test

import (
	"testing"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/cuda/cudatest"
)

// The calls a warm decode step makes (uploads, downloads, device copies, a
// graph replay, kernel launches plain and dependent, a stream wait, an
// event) allocate nothing on the Go heap: they go through ccall, not
// purego's RegisterFunc wrappers. Checked against the stand-in driver
// (cudatest), in a child process.
func TestHotCallsAllocateNothing(t *testing.T) {
	cudatest.Run(t, "TestHotCallsAllocateNothing", "allocations", hotCallsAllocs)
}

func hotCallsAllocs(t *testing.T) {
	c, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := c.LoadPTX("// stand-in")
	if err != nil {
		t.Fatal(err)
	}
	fn, err := mod.Function("k")
	if err != nil {
		t.Fatal(err)
	}
	args := cuda.NewArgs(2)
	args.Set(0, a.Ptr)
	args.Set(1, 4096)
	one, warp := cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 32, Y: 1, Z: 1}
	g, err := s.Capture(func() error { return fn.Launch(one, warp, 0, s, args) })
	if err != nil {
		t.Fatal(err)
	}
	ev, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if !cuda.CanLaunchDependent() {
		t.Fatal("the stand-in exports cuLaunchKernelEx")
	}
	step := func() {
		for _, err := range []error{
			a.UploadAsync(h.Bytes()[:256], s),
			g.Launch(s),
			fn.Launch(one, warp, 0, s, args),
			fn.LaunchDependent(one, warp, 0, s, args),
			b.CopyAsync(a, 1024, s),
			b.DownloadAsync(h.Bytes()[:256], s),
			ev.Record(s),
			s.Synchronize(),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	if n := testing.AllocsPerRun(100, step); n != 0 {
		t.Fatalf("%v allocations a step of hot calls", n)
	}
	t.Log("0 allocations a step of 8 hot calls (stand-in driver)")
}
