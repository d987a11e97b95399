package gpuexec

import (
	"testing"

	"github.com/jitllm/jitllm/runtime/cuda/cudatest"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/tune"
)

// A warm decode step allocates nothing on the Go heap: the graph replay
// (Forward and ForwardGreedy, whose argmax is a dependent launch on sm_90)
// and the plain launches without graphs. The runner runs here against the
// stand-in driver (cudatest: every driver call succeeds and computes
// nothing), in a child process, so the Go side of a step is measured
// without a GPU; TestGPUDecodeAllocs measures it on one.
func TestDecodeAllocsStandIn(t *testing.T) {
	cudatest.Run(t, "TestDecodeAllocsStandIn", "allocations a step", func(t *testing.T) {
		decodeAllocs(t, func(graphs bool, what string, n float64) {
			t.Logf("%s (graphs %v): %.1f allocations a step", what, graphs, n)
			if n != 0 {
				t.Errorf("%s (graphs %v) allocates %.1f a step", what, graphs, n)
			}
		})
	})
}

// decodeAllocs measures a warm decode step's Go heap allocations on the
// device runtime/cuda has loaded: Forward with and without graphs, and
// ForwardGreedy, each reported to check.
func decodeAllocs(t *testing.T, check func(graphs bool, what string, n float64)) {
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	for _, graphs := range []bool{true, false} {
		g := gpuRunner(t, m, exec.Options{Context: 1024, Tune: tune.Off})
		g.SetGraphs(graphs)
		if _, err := g.Forward(prompt); err != nil {
			t.Fatal(err)
		}
		tok := []int32{5}
		check(graphs, "Forward", testing.AllocsPerRun(50, func() {
			if _, err := g.Forward(tok); err != nil {
				t.Fatal(err)
			}
		}))
		if graphs {
			check(graphs, "ForwardGreedy", testing.AllocsPerRun(50, func() {
				if _, err := g.ForwardGreedy(tok); err != nil {
					t.Fatal(err)
				}
			}))
		}
	}
}

// Against the stand-in driver: a runner that tunes its decode mat-vecs on
// first use (the timer's pool, launches and events) and reads the cache the
// next time, and runners with the prefill products on wgmma (both forms),
// plan, bind and step a prompt and a token without error. The Go side
// only: the stand-in computes nothing and times everything alike.
func TestRunnerPathsStandIn(t *testing.T) {
	cudatest.Run(t, "TestRunnerPathsStandIn", "standin_test.go", func(t *testing.T) {
		m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
		dir := t.TempDir()
		for i := range 2 {
			g := gpuRunner(t, m, exec.Options{Context: 256, Tune: tune.Quick, TuneDir: dir})
			if _, err := g.Forward(prompt); err != nil {
				t.Fatal(err)
			}
			t.Logf("tuned runner %d: %d decode kernels", i, len(g.calls))
		}
		for _, w := range []string{"1", "2"} {
			t.Setenv("JITLLM_WGMMA", w)
			g := gpuRunner(t, m, exec.Options{Context: 256, Tune: tune.Off})
			if _, err := g.Forward(prompt); err != nil {
				t.Fatal(err)
			}
			if _, err := g.Forward([]int32{5}); err != nil {
				t.Fatal(err)
			}
			t.Logf("JITLLM_WGMMA=%s: prompt and a token stepped", w)
		}
	})
}
