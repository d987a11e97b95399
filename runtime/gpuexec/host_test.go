package gpuexec

import (
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/jitllm/jitllm/runtime/exec"
)

// TestGPUStepHostTime logs where a decode token's wall time goes outside
// the step graph's device time: the graph launch and its wait, the step
// bytes' upload, the logits' download (page-locked, as the runner does,
// and into a pageable Go slice for comparison), and a Go argmax over the
// logits (greedy sampling). On GPUEXEC_PROFILE_MODEL or tiny256-Q4_K_M.
func TestGPUStepHostTime(t *testing.T) {
	needGPU(t)
	m := profileModel(t)
	r := gpuRunner(t, m, exec.Options{Context: 512})
	logits, err := r.Forward([]int32{1, 2, 3, 4, 5, 6, 7, 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Forward([]int32{argmax(logits)}); err != nil { // captures the graph
		t.Fatal(err)
	}
	if on, err := r.Graphs(); !on {
		t.Fatalf("no step graph: %v", err)
	}
	const n = 64
	median := func(f func()) time.Duration {
		ds := make([]time.Duration, n)
		for i := range ds {
			start := time.Now()
			f()
			ds[i] = time.Since(start)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[n/2]
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	lv := r.p.logits
	lb := r.bufs[lv.a]
	pageable := make([]byte, 4*lv.n)
	pinned := unsafe.Slice((*byte)(unsafe.Pointer(&r.hostLog[0])), 4*lv.n)
	step := r.bufs[r.p.step]
	r.Truncate(16)
	pos := r.pos
	tok := argmax(logits)
	rows := []struct {
		name string
		f    func()
	}{
		{"Forward (one token)", func() {
			r.Truncate(pos)
			if _, err := r.Forward([]int32{tok}); err != nil {
				t.Fatal(err)
			}
		}},
		{"graph launch + stream sync", func() { must(r.graph.Launch(r.s)); must(r.s.Synchronize()) }},
		{"step upload + graph + sync", func() {
			must(step.UploadAsync(r.stepHost[:12], r.s))
			must(r.graph.Launch(r.s))
			must(r.s.Synchronize())
		}},
		{"graph launch alone (host)", func() { must(r.graph.Launch(r.s)) }},
		{"stream sync after that", func() { must(r.s.Synchronize()) }},
		{"logits download, page-locked", func() { must(lb.DownloadAsync(pinned, r.s)); must(r.s.Synchronize()) }},
		{"logits download, pageable", func() { must(lb.DownloadAsync(pageable, r.s)) }},
		{"argmax in Go", func() { tok = argmax(r.hostLog[:lv.n]) }}, // one row of the verify-sized buffer
		{"ForwardGreedy (one token)", func() {
			r.Truncate(pos)
			if _, err := r.ForwardGreedy([]int32{tok}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, row := range rows {
		row.f() // warm
		t.Logf("%-30s %9v (median of %d)", row.name, median(row.f), n)
	}
	// a token's time grows with its position (attention)
	for _, at := range []int{0, 64, 128, 256, r.Context() - 1} {
		d := median(func() {
			r.Truncate(at)
			if _, err := r.Forward([]int32{tok}); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("Forward at position %-4d %9v (median of %d)", at, d, n)
	}
	r.Truncate(16)
	if _, err := r.Forward([]int32{tok}); err != nil {
		t.Fatal(err)
	}
	// the graph's device time, one replay at a time and back to back
	a, err := r.c.NewEvent()
	must(err)
	defer a.Destroy()
	b, err := r.c.NewEvent()
	must(err)
	defer b.Destroy()
	var one float32
	for i := 0; i < 8; i++ {
		must(a.Record(r.s))
		must(r.graph.Launch(r.s))
		must(b.Record(r.s))
		must(b.Synchronize())
		ms, err := b.Since(a)
		must(err)
		one += ms / 8
	}
	must(a.Record(r.s))
	for i := 0; i < 8; i++ {
		must(r.graph.Launch(r.s))
	}
	must(b.Record(r.s))
	must(b.Synchronize())
	ms, err := b.Since(a)
	must(err)
	t.Logf("graph on the device: %.1f µs a lone replay, %.1f µs back to back (%d nodes)", 1000*one, 1000*ms/8, len(r.calls))
}

// ForwardGreedy's device argmax picks the token a Go argmax of Forward's
// logits picks, in decode and prefill steps, and a whole greedy run gives
// the same tokens.
func TestGPUForwardGreedy(t *testing.T) {
	needGPU(t)
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	a := gpuRunner(t, m, exec.Options{Context: 512})
	b := gpuRunner(t, m, exec.Options{Context: 512})
	logits, err := a.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := b.ForwardGreedy(prompt)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 32; i++ {
		if want := argmax(logits); tok != want {
			t.Fatalf("step %d: device argmax %d, Go argmax of the logits %d", i, tok, want)
		}
		if logits, err = a.Forward([]int32{tok}); err != nil {
			t.Fatal(err)
		}
		if tok, err = b.ForwardGreedy([]int32{tok}); err != nil {
			t.Fatal(err)
		}
	}
}
