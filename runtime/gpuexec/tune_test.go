package gpuexec

import (
	"slices"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/tune"
)

// The candidates start with the rule's shape, hold each shape once, and
// only shapes whose rows divide the matrix's; quick varies one field at a
// time, full tries every combination.
func TestDotCandidates(t *testing.T) {
	for _, d := range []dotKey{{"", quant.Q8_0, 1024, 2048}, {"SwiGLU", quant.Q4_K, 8192, 2048}, {"Add", quant.Q6_K, 1023, 4096}} {
		for _, mode := range []tune.Mode{tune.Quick, tune.Full} {
			cs := dotCandidates(d, mode)
			rule := dotShape(d.form, d.t, d.rows)
			rule.Prefetch = false
			if cs[0] != rule {
				t.Errorf("%v %s: first %v, the rule's %v", d, mode, cs[0], rule)
			}
			seen := map[ops.DotShape]bool{}
			for _, c := range cs {
				if seen[c] || d.rows%c.Rows != 0 {
					t.Errorf("%v %s: candidate %v repeated or straddling the rows", d, mode, c)
				}
				seen[c] = true
			}
			if mode == tune.Full && d.rows%4 == 0 && len(cs) != 18 {
				t.Errorf("%v full: %d candidates, want 18", d, len(cs))
			}
			if mode == tune.Quick && (len(cs) < 4 || len(cs) > 7) {
				t.Errorf("%v quick: %d candidates", d, len(cs))
			}
		}
	}
}

// A plan with tuned shapes runs its decode mat-vecs in them (a shape whose
// rows do not divide the matrix's is ignored) and, interpreted, still
// generates what the CPU runner generates; shapes the cache holds are
// taken without measuring (no device touched).
func TestTunedPlanMatchesCPU(t *testing.T) {
	for _, name := range []string{"synth:qwen3-0.6b/Q8_0", "synthetic/tiny256-Q4_K_M.gguf"} {
		m := loadModel(t, name)
		p, err := newPlan(m, 64, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.dots) == 0 {
			t.Fatalf("%s: no decode mat-vecs recorded", name)
		}
		cache := tune.Open(t.TempDir(), "a test device", "a test build")
		for _, d := range p.dots {
			cache.Put(d.tuneShape(), tune.Params{Rows: 1, Threads: 128, Unroll: 1})
		}
		tuned, err := tuneDots(nil, p, tune.Quick, cache)
		if err != nil {
			t.Fatal(err)
		}
		if len(tuned) != len(p.dots) {
			t.Fatalf("%s: %d shapes from the cache for %d mat-vecs", name, len(tuned), len(p.dots))
		}
		// with nothing cached and no device, an error and no shape, not a crash
		if got, err := tuneDots(nil, p, tune.Quick, tune.Open(t.TempDir(), "another device", "a test build")); err == nil || len(got) != 0 {
			t.Errorf("%s: measuring without a device: %d shapes, error %v", name, len(got), err)
		}
		tuned[p.dots[0]] = ops.DotShape{Rows: 3, Threads: 32} // straddles: the rule's instead
		tp, err := newPlanTuned(m, 64, 4, true, 0, tunings{dots: tuned})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range tp.launches {
			if strings.HasPrefix(l.k.Name, "MatVecDot") && strings.Contains(l.k.Name, "t128") {
				n++
			}
			if strings.Contains(l.k.Name, "x3") {
				t.Errorf("%s: %s took a shape whose rows straddle the matrix's", name, l.k.Name)
			}
		}
		if n == 0 {
			t.Errorf("%s: no mat-vec in the tuned shape", name)
		}
		cpu := cpuRunner(t, m, exec.Options{Context: 64})
		agree(t, cpu, newHostExec(tp), 2, tolerance(name))
	}
}

// With Tune the runner measures its decode mat-vecs' and prefill products'
// shapes once, caches
// every one, reads them back the next time (nothing left to measure), and
// still generates the CPU runner's tokens.
func TestGPUTunedRunner(t *testing.T) {
	needGPU(t)
	name := "synth:qwen3-0.6b/Q8_0"
	m := loadModel(t, name)
	dir := t.TempDir()
	g := gpuRunner(t, m, exec.Options{Context: 128, Tune: tune.Quick, TuneDir: dir})
	cpu := cpuRunner(t, m, exec.Options{Context: 128})
	agree(t, cpu, g, 16, tolerance(name))
	cache := tune.AtDevice(dir, deviceKey(g.c))
	if cache.Len() != len(g.p.dots)+len(g.p.products) || len(g.p.products) == 0 {
		t.Errorf("%d shapes cached for %d mat-vecs and %d prefill products", cache.Len(), len(g.p.dots), len(g.p.products))
	}
	for _, b := range g.p.products {
		pr, _ := cache.Get(b.tuneShape(deviceTarget(g.c)))
		sh, _ := tunedBlock(pr)
		t.Logf("prefill product %d×%d×%d: %v (rule %v)", b.rows, b.n, b.k, sh, prefillBlock(b.rows, b.n))
	}
	for _, d := range g.p.dots {
		pr, _ := cache.Get(d.tuneShape())
		t.Logf("%s %s %d×%d: x%d t%d u%d (rule %s)", d.form, d.t, d.rows, d.cols, pr.Rows, pr.Threads, pr.Unroll, dotShape(d.form, d.t, d.rows))
	}
	if _, err := tunePlan(nil, g.p, deviceTarget(g.c), tune.Quick, cache); err != nil { // a nil device: nothing may be measured
		t.Errorf("the cached shapes measured again: %v", err)
	}
}

// The block candidates start with the rule's and hold every one of
// prefillBlocks once.
func TestBlockCandidates(t *testing.T) {
	for _, b := range []blockKey{{512, 2048, 2048}, {512, 128256, 4096}, {7, 64, 256}} {
		cs := blockCandidates(b)
		if cs[0] != prefillBlock(b.rows, b.n) || len(cs) != len(prefillBlocks) {
			t.Errorf("%v: %v, want the rule's %v first and %d in all", b, cs, prefillBlock(b.rows, b.n), len(prefillBlocks))
		}
		for _, sh := range prefillBlocks {
			if !slices.Contains(cs, sh) {
				t.Errorf("%v: %v not tried", b, sh)
			}
		}
	}
}

// A plan with tuned prefill blocks runs its products in them and,
// interpreted, still generates what the CPU runner generates; blocks the
// cache holds are taken without measuring, and a cached block that is none
// of prefillBlocks (a hand-edited or older cache) is not taken.
func TestTunedBlocksPlanMatchesCPU(t *testing.T) {
	name := "synthetic/tiny256-Q4_K_M.gguf"
	m := loadModel(t, name)
	p, err := newPlan(m, 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.products) == 0 {
		t.Fatal("no prefill products recorded")
	}
	tg := ptx.Target{SM: 90}
	cache := tune.Open(t.TempDir(), "a test device", "a test build")
	other := prefillBlocks[0] // the rule gives these small products the smallest block
	for _, b := range p.products {
		if prefillBlock(b.rows, b.n) == other {
			t.Fatalf("%v: the rule already takes %v", b, other)
		}
		cache.Put(b.tuneShape(tg), tune.Params{WarpsM: other.WM, WarpsN: other.WN, TilesM: other.M, TilesN: other.N})
	}
	blocks, err := tuneBlocks(nil, p, tg, tune.Quick, cache)
	if err != nil || len(blocks) != len(p.products) {
		t.Fatalf("%d blocks from the cache for %d products (%v)", len(blocks), len(p.products), err)
	}
	tuned := tunings{blocks: blocks}
	tp, err := newPlanTuned(m, 64, 64, true, 0, tuned)
	if err != nil {
		t.Fatal(err)
	}
	want := ops.MatMulBlock(other, kernel.U16).Name
	for _, l := range tp.prefill {
		if strings.HasPrefix(l.k.Name, "MatMulBlock") && l.k.Name != want {
			t.Errorf("a tuned product runs %s, want %s", l.k.Name, want)
		}
	}
	cpu := cpuRunner(t, m, exec.Options{Context: 64})
	agree(t, cpu, newHostExec(tp), 2, tolerance(name))
	// a block outside prefillBlocks in the cache: measured again (and with
	// no device, an error)
	odd := tune.Open(t.TempDir(), "a test device", "a test build")
	for _, b := range p.products {
		odd.Put(b.tuneShape(tg), tune.Params{WarpsM: 1, WarpsN: 1, TilesM: 1, TilesN: 2})
	}
	if got, err := tuneBlocks(nil, p, tg, tune.Quick, odd); err == nil || len(got) != 0 {
		t.Errorf("a cached block outside prefillBlocks: %d taken, error %v", len(got), err)
	}
}
