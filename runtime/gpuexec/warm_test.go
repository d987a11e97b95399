package gpuexec

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// Warming (JITLLM_WARM): side launches read the first bytes of the next
// weight-streaming launch's matrices after a launch that streams weights,
// across the gaps that hold an attention (every gap with
// JITLLM_WARM_EVERY), in the short and the long one-row steps alike; they
// are rendered as plain launches (no dependent wait on the side stream)
// and leave the logits the plan's, bit for bit.
func TestWarmPlan(t *testing.T) {
	defer func(h int, ts []splitTier) { decodeBlockHeads, decodeSplits = h, ts }(decodeBlockHeads, decodeSplits)
	decodeBlockHeads, decodeSplits = 1, []splitTier{{from: 6, chunks: 16}} // a long step from position 6
	m := loadModel(t, "synthetic/tiny256-Q4_K_M.gguf")
	plain, err := newPlan(m, 64, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, every := range []bool{false, true} {
		t.Run(fmt.Sprint("every ", every), func(t *testing.T) {
			p, err := newPlan(m, 64, 4)
			if err != nil {
				t.Fatal(err)
			}
			const bytes = 3 * warmPiece
			p.warm(bytes, every)
			if len(p.longs) == 0 {
				t.Fatal("no long step to warm")
			}
			for i, ls := range append([][]launch{p.launches}, p.longs[0].launches) {
				t.Run(fmt.Sprint("step ", i), func(t *testing.T) { checkWarmed(t, p, ls, bytes, every) })
			}
			_, _, tg, _, err := render(p, ptx.Target{SM: 90}, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range p.launches {
				if l.side == tg.Dependent(l.k) {
					t.Errorf("%s (side %v): rendered dependent %v", l.k.Name, l.side, tg.Dependent(l.k))
				}
			}
			sameLogits(t, "warmed", plain, p, [][]int32{{1, 2, 3, 4}, {5}, {6}, {7}, {8}})
		})
	}
}

// checkWarmed checks one step's side launches: each run of them follows a
// launch that streams weights and reads, within bytes, the first bytes of
// every matrix of the next launch that does; a run stands in every gap
// between two such launches that holds an attention (every: in every gap)
// and in no other.
func checkWarmed(t *testing.T, p *plan, ls []launch, bytes int, every bool) {
	runs, gaps, last := 0, 0, -1
	for i := 0; i < len(ls); i++ {
		if !ls[i].side {
			if len(p.weightViews(ls[i])) > 0 {
				if last >= 0 && (every || slices.ContainsFunc(ls[last+1:i], p.readsCache)) {
					gaps++
				}
				last = i
			}
			continue
		}
		j := i
		for j < len(ls) && ls[j].side {
			j++
		}
		if i == 0 || len(p.weightViews(ls[i-1])) == 0 {
			t.Fatalf("side launches at %d not after a launch that streams weights", i)
		}
		next := j
		for next < len(ls) && len(p.weightViews(ls[next])) == 0 {
			next++
		}
		if next == len(ls) {
			t.Fatalf("side launches at %d warm no later launch", i)
		}
		if !every && !slices.ContainsFunc(ls[j:next], p.readsCache) {
			t.Fatalf("side launches at %d warm %s across no attention", i, ls[next].k.Name)
		}
		ws := p.weightViews(ls[next])
		if j-i != len(ws) {
			t.Fatalf("%d side launches for %s's %d matrices", j-i, ls[next].k.Name, len(ws))
		}
		for s, w := range ws {
			r := ls[i+s].args[0].(view)
			if r.a != w.a || r.off != w.off || r.n > w.n || r.n > bytes/len(ws) || r.n%warmPiece != 0 || r.n == 0 {
				t.Errorf("side launch %d reads %+v for %s's matrix %+v", i+s, r, ls[next].k.Name, w)
			}
		}
		runs++
		i = j - 1
	}
	if runs == 0 || runs != gaps {
		t.Errorf("%d runs of side launches for %d gaps to warm across", runs, gaps)
	}
}
