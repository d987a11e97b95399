package gpuexec

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
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
			n := 0 // staged kernels
			for _, l := range p.launches {
				for _, k := range append(l.k.Phases, l.k) {
					if staged(k) {
						n++
					}
				}
			}
			if n == 0 {
				t.Fatalf("%s: no staged mat-vec in the one-row step", name)
			}
			src, _, _, _, err := render(p, tg, true)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !strings.Contains(src, "cp.async.cg.shared.global") || !strings.Contains(src, "cp.async.wait_all") {
				t.Fatalf("%s: the stages' copies are not rendered", name)
			}
			ahead, _, _, _, err := render(p, ptx.Target{SM: 90, StageAhead: true}, true)
			if err != nil {
				t.Fatalf("%s, copying ahead: %v", name, err)
			}
			if !strings.Contains(ahead, "cp.async.wait_group 1") {
				t.Fatalf("%s: no stage copied ahead", name)
			}
			sameLogits(t, fmt.Sprintf("%s (phases %d)", name, limit), plain, p, [][]int32{prompt, {5}, {6}, {7}})
		}
	}
}

// JITLLM_EARLY picks the kernels that let the next launch at entry: none
// unset, every kernel but the mat-vecs ("light"), or exactly those a
// staged mat-vec follows ("staged"); the picked kernels render the launch
// before their wait.
func TestLaunchEarlyPicks(t *testing.T) {
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	t.Setenv("JITLLM_STAGE", "65536")
	p, err := newPlan(m, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if launchEarly(p) != nil {
		t.Fatal("JITLLM_EARLY unset: kernels picked")
	}
	for _, mode := range []string{"light", "staged"} {
		t.Setenv("JITLLM_EARLY", mode)
		early := launchEarly(p)
		if early == nil {
			t.Fatalf("%s: nothing picked", mode)
		}
		picked := 0
		for i, l := range p.launches {
			want := !strings.HasPrefix(l.k.Name, "MatVec")
			if mode == "staged" {
				want = i+1 < len(p.launches) && staged(p.launches[i+1].k)
			}
			// a kernel launched at several places is picked if any asks
			if want && !early(l.k) {
				t.Errorf("%s: launch %d (%s) not picked", mode, i, l.k.Name)
			}
			if early(l.k) {
				picked++
			}
		}
		if picked == 0 || picked == len(p.launches) {
			t.Errorf("%s: %d of %d launches picked", mode, picked, len(p.launches))
		}
		src, _, _, _, err := render(p, ptx.Target{SM: 90}, true)
		if err != nil {
			t.Fatal(err)
		}
		before := 0 // kernels that launch their next before their wait
		for _, entry := range strings.Split(src, ".entry ")[1:] {
			next, wait := strings.Index(entry, "griddepcontrol.launch_dependents"), strings.Index(entry, "griddepcontrol.wait")
			if next >= 0 && wait >= 0 && next < wait {
				before++
			}
		}
		if before == 0 {
			t.Errorf("%s: no kernel renders its next launch before its wait", mode)
		}
	}
}

// stageShape counts a CTA's slots as the renderer lays them out
// (ptx.StageSlots): a group of 64 threads is its CTA, one slot, so rows
// that fit launchStageRoom once are staged there; a warp's group shares a
// CTA of four, so the same rows are not.
func TestStageShapeCountsTheCTAsSlots(t *testing.T) {
	t.Setenv("JITLLM_STAGE", "65536")
	t.Setenv("JITLLM_STAGE_AHEAD", "")
	t.Setenv("JITLLM_PHASES", "")
	d := dotKey{t: quant.Q8_0, rows: 4096, cols: 14336} // 15232 bytes a row: 30464 a group of two
	for _, c := range []struct {
		threads int
		staged  bool
	}{{64, true}, {128, true}, {32, false}} {
		sh := stageShape(ops.DotShape{Rows: 2, Threads: c.threads, Unroll: 2}, d)
		if got := sh.Stage > 0; got != c.staged {
			t.Errorf("groups of %d threads: staged %v (%d bytes), want %v", c.threads, got, sh.Stage, c.staged)
		}
	}
}
