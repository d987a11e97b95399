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
