package gpuexec

import (
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/runtime/exec"
)

// The RopeKV stacks (on unless JITLLM_ROPE_STACK=0): a Q4_K_M model's
// blocks whose v projection is of another type than q and k take one
// RopeKV launch where they took two, the long steps too, and the plan
// still agrees with the CPU runner (the v rows' sums in the q and k rows'
// group width: not the two launches' bits); the split kernel renders for
// a dependent sm_90 target.
func TestRopeStackPlan(t *testing.T) {
	defer func(h int, ts []splitTier) { decodeBlockHeads, decodeSplits = h, ts }(decodeBlockHeads, decodeSplits)
	decodeBlockHeads, decodeSplits = 1, []splitTier{{from: 12, chunks: 16}} // a long step from position 12
	// v in Q6_K (tiny256), and in the Q6_KA layout (the synth 1B's 2048 columns)
	for _, name := range []string{"synthetic/tiny256-Q4_K_M.gguf", "synth:llama-3.2-1b/Q4_K_M"} {
		t.Run(name, func(t *testing.T) { ropeStackPlan(t, name) })
	}
	// the split launch at 4 rows a group (JITLLM_ROPE_STACK_ROWS): the
	// same bits as at the shape's 2, in half the CTAs; the v rows at
	// unroll 1 (JITLLM_ROPE_SPLIT_UNROLL): the same bits
	m := loadModel(t, "synth:llama-3.2-1b/Q4_K_M")
	two, err := newPlanTiles(m, 64, 4, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env, val, what string
		named          func(string) bool
	}{
		{"JITLLM_ROPE_STACK_ROWS", "4", "at 4 rows a group", func(n string) bool { return strings.Contains(n, "x4") }},
		{"JITLLM_ROPE_SPLIT_UNROLL", "1", "with the v rows at unroll 1", func(n string) bool { return strings.HasSuffix(n, "_vu1") }},
	} {
		t.Setenv(c.env, c.val)
		p, err := newPlanTiles(m, 64, 4, true, 0)
		t.Setenv(c.env, "")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range p.launches {
			if strings.HasPrefix(l.k.Name, "MatVecDotRopeKV") && l.k.Params[1].Buf.Name == "wb" {
				if !c.named(l.k.Name) {
					t.Errorf("%s: not a split launch %s", l.k.Name, c.what)
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("no split launch %s", c.what)
		}
		agree(t, newHostExec(two), newHostExec(p), 4, 0)
	}
}

func ropeStackPlan(t *testing.T, name string) {
	m := loadModel(t, name)
	t.Setenv("JITLLM_ROPE_STACK", "0")
	plain, err := newPlanTiles(m, 64, 4, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("JITLLM_ROPE_STACK", "1")
	p, err := newPlanTiles(m, 64, 4, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	split := func(ls []launch) (n int) {
		for _, l := range ls {
			if strings.HasPrefix(l.k.Name, "MatVecDotRopeKV") && l.k.Params[1].Buf != nil && l.k.Params[1].Buf.Name == "wb" {
				n++
			}
		}
		return n
	}
	s := split(p.launches)
	if s == 0 || len(p.launches) != len(plain.launches)-s {
		t.Fatalf("%d split launches, %d launches where the plan has %d", s, len(p.launches), len(plain.launches))
	}
	if len(p.longs) == 0 || split(p.longs[0].launches) != s {
		t.Errorf("the long step's RopeKV launches not split alike")
	}
	if _, _, _, _, err := render(p, ptx.Target{SM: 90}, true); err != nil {
		t.Fatal(err)
	}
	cpu := cpuRunner(t, m, exec.Options{Context: 64})
	agree(t, cpu, newHostExec(p), 16, tolerance(name))
}

// On the device, the split RopeKV launches (Q6_K and Q6_KA v rows) give the
// CPU runner's greedy tokens with logits within tolerance.
func TestGPURopeStack(t *testing.T) {
	needGPU(t)
	t.Setenv("JITLLM_ROPE_STACK", "1")
	for _, name := range []string{"synthetic/tiny256-Q4_K_M.gguf", "synth:llama-3.2-1b/Q4_K_M"} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			cpu := cpuRunner(t, m, exec.Options{Context: 128})
			agree(t, cpu, gpuRunner(t, m, exec.Options{Context: 128}), 32, tolerance(name))
		})
	}
}
