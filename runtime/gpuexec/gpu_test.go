package gpuexec

import (
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"testing"
	"time"

	"github.com/jitllm/jitllm/runtime/cuda"
	"github.com/jitllm/jitllm/runtime/exec"
)

// The tests below need a CUDA GPU; they skip, saying why, without one.

func needGPU(t testing.TB) {
	t.Helper()
	if err := cuda.Load(); err != nil {
		t.Skipf("no GPU here: %v", err)
	}
	if _, err := cuda.Devices(); err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
}

func gpuRunner(t testing.TB, m *exec.Model, opt exec.Options) *Runner {
	t.Helper()
	r, err := NewRunner(m, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// cpuRunner is the reference runner the GPU's tokens are checked against,
// closed when the test ends.
func cpuRunner(t testing.TB, m *exec.Model, opt exec.Options) *exec.Runner {
	t.Helper()
	r, err := exec.NewRunner(m, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// Greedy generation of 32 tokens on the GPU equals the CPU runner's, token
// for token, with logits within tolerance(model) at every step.
func TestGPUMatchesCPU(t *testing.T) {
	needGPU(t)
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			cpu := cpuRunner(t, m, exec.Options{Context: 128})
			// the decode attention as the heads choose it, then as
			// AttentionBlock whatever the heads, then so with the long
			// step (AttentionBlockSplit) from position 16; then without
			// dependent launches (where the device has them); then in
			// phased steps (phases.go), with and without the long step;
			// then with staged mat-vecs (stagedmv.go), alone and phased,
			// and copying ahead in resident grids (alone and phased); then
			// with the RopeKV stacks of two types in one launch; then
			// warming the next weights on a second stream (warm.go); then
			// neither staged nor stacked (the defaults stage and stack);
			// then the SwiGLU quantizing its own output
			defer func(h int, ts []splitTier) { decodeBlockHeads, decodeSplits = h, ts }(decodeBlockHeads, decodeSplits)
			defaultHeads := decodeBlockHeads
			tiers, early := decodeSplits, []splitTier{{from: 16, chunks: 16}, {from: 24, chunks: 32}}
			for _, c := range []struct {
				heads                                        int
				splits                                       []splitTier
				dependent, phases, stage, ahead, stack, warm string
			}{{decodeBlockHeads, tiers, "", "", "", "", "", ""}, {1, tiers, "", "", "", "", "", ""}, {1, early, "", "", "", "", "", ""}, {decodeBlockHeads, tiers, "0", "", "", "", "", ""},
				{decodeBlockHeads, tiers, "", "all", "", "", "", ""}, {1, early, "", "4", "", "", "", ""},
				{decodeBlockHeads, early, "", "", "65536", "", "", ""}, {decodeBlockHeads, tiers, "", "4", "65536", "", "", ""},
				{decodeBlockHeads, early, "", "", "65536", "1", "", ""}, {decodeBlockHeads, tiers, "", "all", "65536", "1", "", ""},
				{1, early, "", "", "", "", "1", ""}, {decodeBlockHeads, early, "", "", "", "", "", "1"},
				{decodeBlockHeads, tiers, "", "", "0", "", "0", ""}} {
				decodeBlockHeads, decodeSplits = c.heads, c.splits
				t.Setenv("JITLLM_DEPENDENT_LAUNCH", c.dependent)
				t.Setenv("JITLLM_PHASES", c.phases)
				t.Setenv("JITLLM_STAGE", c.stage)
				t.Setenv("JITLLM_STAGE_AHEAD", c.ahead)
				t.Setenv("JITLLM_STAGE_GRID", c.ahead)
				t.Setenv("JITLLM_ROPE_STACK", c.stack)
				t.Setenv("JITLLM_WARM", c.warm)
				cpu.Truncate(0)
				g := gpuRunner(t, m, exec.Options{Context: 128})
				agree(t, cpu, g, 32, tolerance(name))
				if on, err := g.Graphs(); !on {
					t.Errorf("steps did not replay a CUDA graph: %v", err)
				}
			}
			// the SwiGLU quantizing its own output (JITLLM_SWIGLU_Q8_0), in
			// its shape and at 2 rows a group; the norms begun by the
			// residual's mat-vec (JITLLM_NORM_FOLD), alone and with the
			// SwiGLU's; both counted (=count); the defaults otherwise
			decodeBlockHeads, decodeSplits = defaultHeads, tiers
			for _, env := range []string{"JITLLM_DEPENDENT_LAUNCH", "JITLLM_PHASES", "JITLLM_STAGE", "JITLLM_STAGE_AHEAD", "JITLLM_STAGE_GRID", "JITLLM_ROPE_STACK", "JITLLM_WARM"} {
				t.Setenv(env, "")
			}
			for _, v := range [][2]string{{"1", ""}, {"2", ""}, {"", "1"}, {"1", "1"}, {"count", "count"}} {
				t.Setenv("JITLLM_SWIGLU_Q8_0", v[0])
				t.Setenv("JITLLM_NORM_FOLD", v[1])
				cpu.Truncate(0)
				agree(t, cpu, gpuRunner(t, m, exec.Options{Context: 128}), 32, tolerance(name))
			}
		})
	}
}

// ForwardRows on the device (verify steps: every row's logits, the integer
// mat-vecs over all rows at once) returns the CPU's logits for every row;
// a prompt longer than a verify step still runs in a prefill step and the
// decode after it agrees with the CPU.
func TestGPUForwardRows(t *testing.T) {
	needGPU(t)
	long := append(append([]int32(nil), prompt...), prompt...) // 14 tokens: more than a verify step
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			cpu := cpuRunner(t, m, exec.Options{Context: 128, MaxBatch: 16})
			g := gpuRunner(t, m, exec.Options{Context: 128})
			agreeRows(t, cpu, g, tolerance(name))
			cpu.Truncate(0)
			g.Truncate(0)
			agreeFrom(t, cpu, g, long, 8, tolerance(name))
		})
	}
}

// The GPU runs the interpreter's arithmetic: the plan interpreted on the
// host and run on the device give the same logits up to the last bits of
// the transcendental functions (docs/ptx.md: exp, sin, cos within an ulp):
// 1e-4 on the F32 model, tolerance(model) where activation quantization can
// amplify such a bit.
func TestGPUMatchesInterpretedPlan(t *testing.T) {
	needGPU(t)
	for _, name := range []string{"stories260K.gguf", "synthetic/tiny256-Q4_K_M.gguf"} {
		m := loadModel(t, name)
		p, err := newPlan(m, 64, prefillRows(64))
		if err != nil {
			t.Fatal(err)
		}
		h := newHostExec(p)
		g := gpuRunner(t, m, exec.Options{Context: 64})
		a, err := h.Forward(prompt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := g.Forward(prompt)
		if err != nil {
			t.Fatal(err)
		}
		tol := tolerance(name)
		if name == "stories260K.gguf" {
			tol = 1e-4
		}
		d := maxDiff(a, b)
		t.Logf("%s: GPU and interpreter differ by %.3g", name, d)
		if d > tol {
			t.Errorf("%s: GPU and interpreter differ by %.3g (> %g)", name, d, tol)
		}
	}
}

// Graph replay, plain launches, Truncate and LogitsAll agree: a rewound
// sequence recomputes the same logits, and every row of LogitsAll ends in
// the last row's logits (within rounding: step shapes may pick other kernels).
func TestGPUGraphsTruncateLogitsAll(t *testing.T) {
	needGPU(t)
	m := loadModel(t, "stories260K.gguf")
	g := gpuRunner(t, m, exec.Options{Context: 64})
	a, err := g.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), a...)
	g.Truncate(0)
	g.SetGraphs(false)
	b, err := g.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, b); d != 0 {
		t.Fatalf("plain launches after Truncate differ from graph replay by %g", d)
	}
	if g.Pos() != len(prompt) || g.Context() != 64 {
		t.Fatalf("Pos %d Context %d", g.Pos(), g.Context())
	}
	all := gpuRunner(t, m, exec.Options{Context: 64, LogitsAll: true})
	rows, err := all.Forward(prompt)
	if err != nil {
		t.Fatal(err)
	}
	v := m.VocabSize()
	if len(rows) != len(prompt)*v {
		t.Fatalf("LogitsAll gave %d values, want %d", len(rows), len(prompt)*v)
	}
	// LogitsAll runs one-row steps, a prompt prefill steps: the plan may
	// pick other kernels for either (tiles for quantized products), so the
	// rows are held to the float tolerance, not to their bits
	if d := maxDiff(want, rows[(len(prompt)-1)*v:]); d > tolerance("stories260K.gguf") {
		t.Fatalf("LogitsAll's last row differs by %g", d)
	}
	if _, err := g.Forward(make([]int32, 64)); err == nil {
		t.Fatal("a step past the context was accepted")
	}
}

// A warm decode step allocates nothing on the Go heap on the device either
// (TestDecodeAllocsStandIn checks the same without one): the graph replay,
// ForwardGreedy's dependent argmax launch, and plain launches.
func TestGPUDecodeAllocs(t *testing.T) {
	needGPU(t)
	decodeAllocs(t, func(graphs bool, what string, n float64) {
		t.Logf("%s (graphs %v): %.1f Go heap allocations a step", what, graphs, n)
		if n != 0 {
			t.Errorf("%s (graphs %v) allocates %.1f a step", what, graphs, n)
		}
	})
}

// Decode speed on synthetic/tiny256-Q4_K_M.gguf (logged, not asserted).
func TestGPUDecodeSpeed(t *testing.T) {
	needGPU(t)
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	for _, graphs := range []bool{true, false} {
		g := gpuRunner(t, m, exec.Options{Context: 1024})
		g.SetGraphs(graphs)
		logits, err := g.Forward(prompt)
		if err != nil {
			t.Fatal(err)
		}
		const n = 256
		start := time.Now()
		for i := 0; i < n; i++ {
			if logits, err = g.Forward([]int32{argmax(logits)}); err != nil {
				t.Fatal(err)
			}
		}
		el := time.Since(start)
		t.Logf("graphs=%v: %d decode steps in %v: %.0f tok/s (%d kernels a step)", graphs, n, el, n/el.Seconds(), len(g.calls))
	}
}

// On sm_90 and later (with cuLaunchKernelEx) a decode step's launches are
// dependent launches and a prefill step's are not; JITLLM_DEPENDENT_LAUNCH=0
// turns them off.
func TestGPUDependentLaunch(t *testing.T) {
	needGPU(t)
	m := loadModel(t, "stories260K.gguf")
	for _, env := range []string{"", "0"} {
		t.Setenv("JITLLM_DEPENDENT_LAUNCH", env)
		g := gpuRunner(t, m, exec.Options{Context: 64})
		want := env == "" && dependentLaunch(ptx.ForDevice(g.c.Device.Major, g.c.Device.Minor))
		for _, c := range g.calls {
			if c.dependent != want {
				t.Fatalf("JITLLM_DEPENDENT_LAUNCH=%q: a decode launch dependent %v, want %v", env, c.dependent, want)
			}
		}
		for _, c := range g.pcalls {
			if c.dependent {
				t.Fatalf("JITLLM_DEPENDENT_LAUNCH=%q: a prefill launch is dependent", env)
			}
		}
		t.Logf("JITLLM_DEPENDENT_LAUNCH=%q: decode launches dependent: %v", env, want)
	}
}

// Two runners sharing one upload of the weights (Runner.Share) each
// generate the CPU runner's tokens for their own sequence: the second's
// steps leave the first's KV cache as it was, and the second outlives the
// first.
func TestGPUShare(t *testing.T) {
	needGPU(t)
	name := "synthetic/tiny256-Q4_K_M.gguf"
	m := loadModel(t, name)
	g, err := NewRunner(m, exec.Options{Context: 128})
	if err != nil {
		t.Fatal(err)
	}
	o, err := g.Share()
	if err != nil {
		g.Close()
		t.Fatal(err)
	}
	defer o.Close()
	cpus := make([]*exec.Runner, 3)
	for i := range cpus {
		if cpus[i], err = exec.NewRunner(m, exec.Options{Context: 128}); err != nil {
			t.Fatal(err)
		}
		defer cpus[i].Close()
	}
	agree(t, cpus[0], g, 8, tolerance(name))
	agree(t, cpus[1], o, 8, tolerance(name))
	// the first goes on where it was: the second wrote only its own cache
	tok := []int32{7}
	want, err := cpus[0].Forward(tok)
	if err != nil {
		t.Fatal(err)
	}
	got, err := g.Forward(tok)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, got); d > tolerance(name) {
		t.Errorf("the first runner after the second's steps: logits differ by %.3g", d)
	}
	g.Close()
	o.Truncate(0)
	agree(t, cpus[2], o, 8, tolerance(name))
}
