package gpuexec

import (
	"strings"
	"testing"

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
		tp, err := newPlanTuned(m, 64, 4, true, 0, tuned)
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
		cpu, err := exec.NewRunner(m, exec.Options{Context: 64})
		if err != nil {
			t.Fatal(err)
		}
		agree(t, cpu, newHostExec(tp), 2, tolerance(name))
		cpu.Close()
	}
}

// With Tune the runner measures its decode mat-vecs' shapes once, caches
// every one, reads them back the next time (nothing left to measure), and
// still generates the CPU runner's tokens.
func TestGPUTunedRunner(t *testing.T) {
	needGPU(t)
	name := "synth:qwen3-0.6b/Q8_0"
	m := loadModel(t, name)
	dir := t.TempDir()
	g := gpuRunner(t, m, exec.Options{Context: 128, Tune: tune.Quick, TuneDir: dir})
	cpu, err := exec.NewRunner(m, exec.Options{Context: 128})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	agree(t, cpu, g, 16, tolerance(name))
	cache := tune.AtDevice(dir, deviceKey(g.c))
	if cache.Len() != len(g.p.dots) {
		t.Errorf("%d shapes cached for %d mat-vecs", cache.Len(), len(g.p.dots))
	}
	for _, d := range g.p.dots {
		pr, _ := cache.Get(d.tuneShape())
		t.Logf("%s %s %d×%d: x%d t%d u%d (rule %s)", d.form, d.t, d.rows, d.cols, pr.Rows, pr.Threads, pr.Unroll, dotShape(d.form, d.t, d.rows))
	}
	if _, err := tuneDots(nil, g.p, tune.Quick, cache); err != nil { // a nil device: nothing may be measured
		t.Errorf("the cached shapes measured again: %v", err)
	}
}
