package gpuexec

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

// profileCalls logs where a step's time goes, kernel by kernel.
func profileCalls(t *testing.T, r *Runner, what string, calls []call, launches []launch) {
	const reps = 20
	type stat struct {
		name  string
		n     int
		total time.Duration
	}
	by := map[string]*stat{}
	var all time.Duration
	for i := range calls {
		c := &calls[i]
		name := launches[i].k.Name
		if err := r.s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for j := 0; j < reps; j++ {
			if err := c.launch(r.s); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		el := time.Since(start) / reps
		s := by[name]
		if s == nil {
			s = &stat{name: name}
			by[name] = s
		}
		s.n++
		s.total += el
		all += el
	}
	var ss []*stat
	for _, s := range by {
		ss = append(ss, s)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].total > ss[j].total })
	t.Logf("%s: %d launches, %v in all (each timed alone, launch overhead included)", what, len(calls), all)
	for _, s := range ss {
		t.Logf("%-22s %4d launches %10v  %5.1f%%  %8v each", s.name, s.n, s.total, 100*float64(s.total)/float64(all), s.total/time.Duration(s.n))
	}
}

// TestGPUKernelTimes logs where a decode step's and a prefill step's time
// go, kernel by kernel (each launch repeated and timed on the host around a stream
// sync, so launch overhead is included): on GPUEXEC_PROFILE_MODEL (a GGUF
// path) or synthetic/tiny256-Q4_K_M.gguf, after a 64-token prompt.
func TestGPUKernelTimes(t *testing.T) {
	needGPU(t)
	m := profileModel(t)
	r := gpuRunner(t, m, exec.Options{Context: 1024})
	r.SetGraphs(false)
	toks := make([]int32, 64)
	for i := range toks {
		toks[i] = int32(1 + i%7)
	}
	if _, err := r.Forward(toks); err != nil {
		t.Fatal(err)
	}
	profileCalls(t, r, "decode step", r.calls, r.p.launches)
	profileCalls(t, r, fmt.Sprintf("prefill step (%d rows)", r.p.rows), r.pcalls, r.p.prefill)

	// the step's captured graph, timed on the device; then a graph of as
	// many launches of the step's smallest kernel, for the cost of a node
	small := 0
	for i := range r.calls {
		if r.calls[i].grid.X*r.calls[i].block.X < r.calls[small].grid.X*r.calls[small].block.X {
			small = i
		}
	}
	step, err := r.s.Capture(r.launchAll)
	if err != nil {
		t.Fatal(err)
	}
	defer step.Destroy()
	c := &r.calls[small]
	tiny, err := r.s.Capture(func() error {
		for range r.calls {
			if err := c.launch(r.s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tiny.Destroy()
	for _, g := range []struct {
		name string
		g    *cuda.Graph
	}{{"the step's graph", step}, {fmt.Sprintf("%d launches of %s (%d threads)", len(r.calls), r.p.launches[small].k.Name, c.grid.X*c.block.X), tiny}} {
		us := replayMicros(t, r, g.g, 1)
		t.Logf("%s: %.1f µs a replay on the device, %.2f µs a node", g.name, us, us/float64(len(r.calls)))
	}
}

// replayMicros is graph g's time a replay on r's stream, timed by events
// over 50 replays after warm ones.
func replayMicros(t *testing.T, r *Runner, g *cuda.Graph, warm int) float64 {
	t.Helper()
	a, _ := r.c.NewEvent()
	b, _ := r.c.NewEvent()
	defer a.Destroy()
	defer b.Destroy()
	const n = 50
	for j := 0; j < warm; j++ {
		if err := g.Launch(r.s); err != nil {
			t.Fatal(err)
		}
	}
	a.Record(r.s)
	for j := 0; j < n; j++ {
		if err := g.Launch(r.s); err != nil {
			t.Fatal(err)
		}
	}
	b.Record(r.s)
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ms, err := b.Since(a)
	if err != nil {
		t.Fatal(err)
	}
	return 1000 * float64(ms) / n
}

// TestGPUMatMulForms checks the prefill products on the device against
// the interpreter (a small case, bit for bit) and logs their times on
// 2048×2048 and 8192×2048 Q4_K matrices times 256 rows.
func TestGPUMatMulForms(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	forms := []*kernel.Kernel{ops.MatMulRows(ops.Q4_K)}
	for _, outs := range []int{1, ops.MatMulOuts, 4} {
		mw, _ := ops.MatMulWarpTile("Q4_K", outs)
		forms = append(forms, mw)
	}
	mod, tg := loadKernels(t, c, forms...)
	r := rand.New(rand.NewPCG(3, 4))
	for _, size := range []struct{ n, out, rows int }{{512, 64, 11}, {2048, 2048, 256}, {2048, 8192, 256}} {
		var w []byte
		for i := 0; i < size.out; i++ {
			w = append(w, opstest.Row(quant.Q4_K, size.n, nil, r)...)
		}
		x := opstest.Floats(size.rows*size.n, 1, r)
		wd, xd := upload(t, c, w), upload(t, c, f32Bytes(x))
		yd, err := c.Alloc(uint64(4 * size.rows * size.out))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range forms {
			a := cuda.NewArgs(7)
			a.Set(0, wd.Ptr)
			a.Set(1, uint64(len(w)))
			a.Set(2, xd.Ptr)
			a.Set(3, uint64(len(x)))
			a.Set(4, yd.Ptr)
			a.Set(5, uint64(size.rows*size.out))
			a.Set(6, uint64(size.n))
			run := launcher(t, mod, tg, s, k, a, ptx.Elems(len(w)), ptx.Elems(len(x)), ptx.Elems(size.rows*size.out), size.n)
			run()
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if size.rows < 100 {
				got := make([]byte, 4*size.rows*size.out)
				if err := yd.Download(got); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, size.rows*size.out)
				if err := kernel.Run(k, w, x, want, size.n); err != nil {
					t.Fatal(err)
				}
				if string(got) != string(f32Bytes(want)) {
					t.Errorf("%s: the device differs from the interpreter", k.Name)
				}
				continue
			}
			us := deviceMicros(t, c, s, 20, run)
			flop := 2 * float64(size.n) * float64(size.out) * float64(size.rows)
			t.Logf("%s %dx%d times %d rows: %.1f µs, %.2f TFLOP/s", k.Name, size.out, size.n, size.rows, us, flop/us/1e6)
		}
		wd.Free()
		xd.Free()
		yd.Free()
	}
}

// profileModel is the model the profiling tests run: GPUEXEC_PROFILE_MODEL
// (a GGUF or .jlm path) or synthetic/tiny256-Q4_K_M.gguf.
func profileModel(t *testing.T) *exec.Model {
	t.Helper()
	path := os.Getenv("GPUEXEC_PROFILE_MODEL")
	if path == "" {
		return loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	}
	src, err := weights.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	m, err := exec.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// promptedRunner is a runner of profileModel after a 64-token prompt, and
// the prompt.
func promptedRunner(t *testing.T) (*Runner, []int32) {
	t.Helper()
	r := gpuRunner(t, profileModel(t), exec.Options{Context: 1024})
	toks := make([]int32, 64)
	for i := range toks {
		toks[i] = int32(1 + i%7)
	}
	if _, err := r.Forward(toks); err != nil {
		t.Fatal(err)
	}
	return r, toks
}

// TestGPUStepWithout measures what each kind of kernel costs inside the
// decode step's graph, where launches overlap and weights come cold from
// memory: the step captured whole, then without every launch of one
// kernel (its marginal cost: the results are wrong, the time is what
// counts), then the mat-vecs alone (the weights' stream with nothing
// between). On GPUEXEC_PROFILE_MODEL, after a 64-token prompt.
func TestGPUStepWithout(t *testing.T) {
	needGPU(t)
	r, _ := promptedRunner(t)
	replay := func(keep func(name string) bool) (float64, int) {
		var cs []call
		for i := range r.calls {
			if keep(r.p.launches[i].k.Name) {
				cs = append(cs, r.calls[i])
			}
		}
		g, err := r.s.Capture(func() error { return launchCalls(cs, r.s, r.fork) })
		if err != nil {
			t.Fatal(err)
		}
		defer g.Destroy()
		return replayMicros(t, r, g, 3), len(cs)
	}
	whole, n := replay(func(string) bool { return true })
	t.Logf("the step: %d launches, %.1f µs a replay", n, whole)
	count := map[string]int{}
	var names []string
	for i := range r.calls {
		name := r.p.launches[i].k.Name
		if count[name] == 0 {
			names = append(names, name)
		}
		count[name]++
	}
	for _, name := range names {
		us, _ := replay(func(k string) bool { return k != name })
		t.Logf("without %-34s %4d launches: %8.1f µs, costs %7.1f µs (%5.1f%%), %5.2f µs a launch", name, count[name], us, whole-us, 100*(whole-us)/whole, (whole-us)/float64(count[name]))
	}
	isMatVec := func(k string) bool { return len(k) > 6 && k[:6] == "MatVec" }
	mv, n := replay(isMatVec)
	t.Logf("the mat-vecs alone: %d launches, %.1f µs (%.1f%% of the step)", n, mv, 100*mv/whole)
}

// TestGPUVerifyStep times what speculative decoding and short prompts pay
// on GPUEXEC_PROFILE_MODEL after a 64-token prompt: a one-row step, a
// verify step of 2 to 9 rows (ForwardRows: every row's logits,
// the weights read once) and, for the same few tokens, the prefill step
// that ran them before (a short prompt's Forward now takes the verify step).
func TestGPUVerifyStep(t *testing.T) {
	needGPU(t)
	g, toks := promptedRunner(t)
	base := g.Pos()
	const reps = 30
	timeIt := func(f func() error) float64 {
		for range 3 {
			if err := f(); err != nil {
				t.Fatal(err)
			}
			g.Truncate(base)
		}
		start := time.Now()
		for range reps {
			if err := f(); err != nil {
				t.Fatal(err)
			}
			g.Truncate(base)
		}
		return float64(time.Since(start).Microseconds()) / reps
	}
	one := timeIt(func() error { _, err := g.Forward(toks[:1]); return err })
	t.Logf("one-row step: %.0f µs", one)
	for _, n := range []int{2, 3, 4, 9} {
		us := timeIt(func() error { _, err := g.ForwardRows(toks[:n]); return err })
		t.Logf("verify step of %d rows: %.0f µs (%.2f one-row steps; %.0f µs a row)", n, us, us/one, us/float64(n))
	}
	pre := timeIt(func() error { return g.prefillStep(toks[:4], g.logits[:g.p.vocab], true) })
	t.Logf("prefill step of %d rows with 4 real: %.0f µs", g.p.rows, pre)
}

// TestGPUStepTrace logs the decode step's timeline on
// GPUEXEC_PROFILE_MODEL after a 64-token prompt, CTA by CTA on the
// device's clock (JITLLM_TRACE=1: every kernel records its CTAs' start,
// wait and end): each launch's gap after the one before was done, how
// long it ran and its tail, then those summed by kernel.
func TestGPUStepTrace(t *testing.T) {
	needGPU(t)
	if os.Getenv("JITLLM_TRACE") != "1" {
		t.Skip("set JITLLM_TRACE=1: the kernels are then rendered to record their CTAs' times")
	}
	r, _ := promptedRunner(t)
	g, err := r.s.Capture(func() error { return launchCalls(r.calls, r.s, r.fork) })
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	t.Logf("the traced step: %.1f µs a replay", replayMicros(t, r, g, 3))
	spans, err := r.traceStep(g)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range spans {
		if s.firstStart > s.firstWait || s.firstWait > s.lastDone || s.doneP90 > s.lastDone {
			t.Errorf("launch %d (%s): times out of order: start %d wait %d p90 %d done %d", i, s.name, s.firstStart, s.firstWait, s.doneP90, s.lastDone)
		}
	}
	t.Log("\n" + traceReport(spans))
}
