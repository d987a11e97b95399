package gpuexec

import (
	"fmt"
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
		// plain launches, phased steps (resident launches, phases.go), then
		// warming on a second stream (warm.go: its fork and join each step)
		for _, c := range []struct{ phases, warm string }{{"", ""}, {"all", ""}, {"", "1"}} {
			t.Setenv("JITLLM_PHASES", c.phases)
			t.Setenv("JITLLM_WARM", c.warm)
			decodeAllocs(t, func(graphs bool, what string, n float64) {
				t.Logf("%s (graphs %v, JITLLM_PHASES=%q JITLLM_WARM=%q): %.1f allocations a step", what, graphs, c.phases, c.warm, n)
				if n != 0 {
					t.Errorf("%s (graphs %v, JITLLM_PHASES=%q JITLLM_WARM=%q) allocates %.1f a step", what, graphs, c.phases, c.warm, n)
				}
			})
		}
	})
}

// decodeAllocs measures a warm decode step's Go heap allocations on the
// device runtime/cuda has loaded: Forward with and without graphs,
// ForwardGreedy and ForwardRows of a speculative step, each reported to
// check, and Forward in each long step (decodeSplits).
func decodeAllocs(t *testing.T, check func(graphs bool, what string, n float64)) {
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	// the decode attention of models of 16 heads and more (the block
	// attention, and past each tier's position the long step's split)
	defer func(h int, ts []splitTier) { decodeBlockHeads, decodeSplits = h, ts }(decodeBlockHeads, decodeSplits)
	decodeBlockHeads, decodeSplits = 1, []splitTier{{from: 512, chunks: 16}, {from: 768, chunks: 32}}
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
		// a speculative step: the chosen token and 3 drafts checked in a
		// verify step, the cache cut back as if all were rejected
		drafts := []int32{5, 6, 7, 8}
		check(graphs, "ForwardRows (verify step)", testing.AllocsPerRun(50, func() {
			pos := g.Pos()
			if _, err := g.ForwardRows(drafts); err != nil {
				t.Fatal(err)
			}
			g.Truncate(pos + 1)
		}))
		// past each tier's position: its long step's graph (or launches)
		if len(g.lcalls) != len(decodeSplits) {
			t.Fatalf("%d long steps in a context of 1024, want %d", len(g.lcalls), len(decodeSplits))
		}
		for i, sp := range decodeSplits {
			if _, err := g.Forward(make([]int32, sp.from-g.Pos())); err != nil {
				t.Fatal(err)
			}
			check(graphs, fmt.Sprintf("Forward (long step %d)", i), testing.AllocsPerRun(50, func() {
				if _, err := g.Forward(tok); err != nil {
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

// Against the stand-in driver: a runner shared (Runner.Share) holds the
// first's constant allocations (the same device pointers: nothing uploaded
// twice) and its own KV caches and activations, steps on its own, outlives
// the runner it came from, and the last to close frees the share.
func TestShareStandIn(t *testing.T) {
	cudatest.Run(t, "TestShareStandIn", "standin_test.go", func(t *testing.T) {
		m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
		g, err := NewRunner(m, exec.Options{Context: 256, Tune: tune.Off})
		if err != nil {
			t.Fatal(err)
		}
		o, err := g.Share()
		if err != nil {
			t.Fatal(err)
		}
		constant, own := 0, 0
		for i, a := range g.p.allocs {
			same := g.bufs[i].Ptr == o.bufs[i].Ptr
			if a.constant() != same {
				t.Errorf("allocation %s (constant %v): shared %v", a.name, a.constant(), same)
			}
			if a.constant() {
				constant++
			} else {
				own++
			}
		}
		if constant == 0 || own == 0 {
			t.Fatalf("%d constant and %d own allocations", constant, own)
		}
		for _, r := range []*Runner{g, o} {
			if _, err := r.Forward(prompt); err != nil {
				t.Fatal(err)
			}
		}
		sh := g.sh
		g.Close()
		if sh.refs != 1 || sh.mod == nil {
			t.Fatalf("after the first closed: %d holds, module %v", sh.refs, sh.mod)
		}
		if _, err := o.Forward([]int32{5}); err != nil {
			t.Fatal(err)
		}
		o.Close()
		if sh.refs != 0 || sh.mod != nil || sh.bufs != nil {
			t.Errorf("after the last closed: %d holds, the module and weights kept", sh.refs)
		}
		if _, err := o.Share(); err == nil {
			t.Error("a closed runner shared")
		}
		t.Logf("%d constant allocations shared, %d own", constant, own)
	})
}
