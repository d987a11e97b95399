package gpuexec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// A plan whose one-row mat-vecs stage their rows (JITLLM_STAGE) computes
// the plan's logits bit for bit in the interpreter (which fails any weight
// load outside its group's stage), alone and in phased steps, and renders
// the stages' copies for a dependent sm_90 target.
func TestStagedPlanMatchesPlan(t *testing.T) {
	defer func(ts []splitTier) { decodeSplits = ts }(decodeSplits)
	decodeSplits = []splitTier{{from: 12, chunks: 16}}
	tg := ptx.Target{SM: 90}
	for _, name := range []string{"synthetic/tiny256-Q4_K_M.gguf", "synth:qwen3-0.6b/Q8_0"} {
		m := loadModel(t, name)
		plain, err := newPlan(m, 64, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{-1, 0} { // alone; phased
			t.Setenv("JITLLM_STAGE", "65536")
			p, err := newPlan(m, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			if limit >= 0 {
				if err := p.phase(tg, limit); err != nil {
					t.Fatal(err)
				}
			}
			staged := 0
			for _, l := range p.launches {
				for _, k := range append(l.k.Phases, l.k) {
					if kernel.Any(k.Body, func(s *kernel.Stmt) bool { return s.Op == kernel.SStage }) {
						staged++
					}
				}
			}
			if staged == 0 {
				t.Fatalf("%s: no staged mat-vec in the one-row step", name)
			}
			src, _, _, _, err := render(p, tg, true)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !strings.Contains(src, "cp.async.cg.shared.global") || !strings.Contains(src, "cp.async.wait_all") {
				t.Fatalf("%s: the stages' copies are not rendered", name)
			}
			sameLogits(t, fmt.Sprintf("%s (phases %d)", name, limit), plain, p, [][]int32{prompt, {5}, {6}, {7}})
		}
	}
}
