package gpuexec

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// A phased one-row step (runs of launches fused into phased kernels) is
// the plan's step bit for bit: the interpreter runs the phases in turn as
// the launches ran. Its kernels render for sm_90 with dependent launches.
func TestPhasedPlanMatchesPlan(t *testing.T) {
	defer func(ts []splitTier) { decodeSplits = ts }(decodeSplits)
	decodeSplits = []splitTier{{from: 12, chunks: 16}}
	tg := ptx.Target{SM: 90}
	for _, name := range []string{"synthetic/tiny256-Q4_K_M.gguf", "synth:qwen3-0.6b/Q8_0"} {
		m := loadModel(t, name)
		for _, limit := range []int{0, 4} {
			plain, err := newPlan(m, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			p, err := newPlan(m, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.phase(tg, limit); err != nil {
				t.Fatal(err)
			}
			steps, was := [][]launch{p.launches}, [][]launch{plain.launches}
			for i := range p.longs {
				steps, was = append(steps, p.longs[i].launches), append(was, plain.longs[i].launches)
			}
			bars := map[view]bool{}
			for i, ls := range steps {
				phased, phases := 0, 0
				for _, l := range ls {
					if n := len(l.k.Phases); n > 0 {
						// each launch its own two words (a "count" barrier's serve one grid)
						b := l.args[len(l.args)-1].(view)
						if bars[b] || b.off%2 != 0 || b.n != 2 || p.allocs[b.a].kind != kernel.U32 {
							t.Errorf("%s: %s's barrier words %+v shared or misplaced", name, l.k.Name, b)
						}
						bars[b] = true
						phased++
						phases += n
						if limit > 0 && n > limit {
							t.Errorf("%s: %s of %d phases, limit %d", name, l.k.Name, n, limit)
						}
					}
				}
				if phased == 0 || len(ls)-phased+phases != len(was[i]) {
					t.Errorf("%s limit %d: %d launches (%d phased of %d phases) for %d", name, limit, len(ls), phased, phases, len(was[i]))
				}
			}
			if _, _, _, _, err := render(p, tg, true); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			sameLogits(t, fmt.Sprintf("%s limit %d", name, limit), plain, p, [][]int32{prompt, {5}, {6}, {7}, {8}, {9}, {10}, {11}})
		}
	}
	if limit, on := phaseLimit(); on || limit != 0 {
		t.Errorf("JITLLM_PHASES unset: limit %d, on %v", limit, on)
	}
	for v, want := range map[string]int{"all": 0, "6": 6} {
		t.Setenv("JITLLM_PHASES", v)
		if limit, on := phaseLimit(); !on || limit != want {
			t.Errorf("JITLLM_PHASES=%s: limit %d, on %v", v, limit, on)
		}
	}
	t.Setenv("JITLLM_PHASES", "1")
	if _, on := phaseLimit(); on {
		t.Errorf("JITLLM_PHASES=1 fuses")
	}
}

// sameLogits checks that plan p's interpreted steps give want's logits bit
// for bit, step by step.
func sameLogits(t *testing.T, what string, want, p *plan, steps [][]int32) {
	t.Helper()
	a, b := newHostExec(want), newHostExec(p)
	for step, toks := range steps {
		x, err := a.Forward(toks)
		if err != nil {
			t.Fatal(err)
		}
		y, err := b.Forward(toks)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(x, y) {
			t.Fatalf("%s: step %d's logits differ", what, step)
		}
	}
}
