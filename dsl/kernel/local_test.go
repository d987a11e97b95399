package kernel_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// rowSums: y[i] = the sum of row i of w (n values), a warp a row.
func rowSums() *k.Kernel {
	b := k.New("rowSums")
	w, y := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	n := b.Scalar("n", k.Int)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		b.Store(y, i, b.Sum("s", k.F32, 0, n, func(j k.Expr) k.Expr { return w.At(i.Mul(n).Add(j)) }))
	})
	b.Schedule("s_i", k.LoopSchedule{Threads: 32})
	return b.MustBuild()
}

// blockMax: m[b] = the largest of y's block b of 32, a warp a block.
func blockMax() *k.Kernel { return blockMaxShifted(0) }

// blockMaxShifted: m[b] = the largest of y's block b+shift of 32 (around
// the end), a warp a block.
func blockMaxShifted(shift int) *k.Kernel {
	b := k.New(fmt.Sprintf("blockMax%d", shift))
	y, m := b.Buffer("y", k.F32), b.Buffer("m", k.F32)
	b.ParallelFor("b", 0, m.Len(), func(i k.Expr) {
		blk := b.Let("blk", i.Add(shift).Rem(m.Len()))
		acc := b.Acc("mx", k.OpMax, k.F(math.Inf(-1)))
		b.For("j", 0, 32, func(j k.Expr) { b.Fold(acc, y.At(blk.Mul(32).Add(j))) })
		b.Store(m, i, acc.Get())
	})
	b.Schedule("j", k.LoopSchedule{Threads: 32})
	return b.MustBuild()
}

// Local phases run as Phases do; run CTA by CTA they give the same
// results where each CTA's epilogue reads only its own rows (32 rows a CTA
// of 1024, one block of 32 after) and not where it reads another's (16 rows
// a CTA of 512, each block after half another CTA's).
func TestLocalPhases(t *testing.T) {
	const rows, n = 32 * 7, 40
	w := make([]float32, rows*n)
	for i := range w {
		w[i] = float32((i*7919)%101) - 50
	}
	want := make([]float32, rows/32)
	for b := range want {
		want[b] = float32(math.Inf(-1))
		for r := 32 * b; r < 32*(b+1); r++ {
			var s float32
			for j := range n {
				s += w[r*n+j]
			}
			want[b] = max(want[b], s)
		}
	}
	for _, c := range []struct {
		cta     int
		aligned bool
	}{{1024, true}, {512, false}} {
		lp, err := k.LocalPhases("rowsMax", c.cta, []int{0, 1}, rowSums(), blockMax())
		if err != nil {
			t.Fatal(err)
		}
		run := func(cta bool, ctas int) []float32 {
			y := slices.Repeat([]float32{float32(math.Inf(-1))}, rows)
			m := make([]float32, rows/32)
			var err error
			if cta {
				err = k.RunCTAs(lp, ctas, w, y, n, y, m)
			} else {
				err = k.Run(lp, w, y, n, y, m)
			}
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		phases := run(false, 0)
		for b := range want {
			if math.Abs(float64(phases[b]-want[b])) > 1e-3 {
				t.Fatalf("CTA %d: block %d: %v, want %v", c.cta, b, phases[b], want[b])
			}
		}
		for _, ctas := range []int{1, 3, 7} {
			same := slices.Equal(run(true, ctas), phases)
			if c.aligned && !same {
				t.Errorf("CTA %d, %d CTAs: CTA by CTA differs from phase by phase", c.cta, ctas)
			}
			if !c.aligned && same && ctas > 1 {
				t.Errorf("CTA %d, %d CTAs: a broken contract went unseen", c.cta, ctas)
			}
		}
	}
	if _, err := k.LocalPhases("bad", 512, []int{0, 32}, rowSums(), blockMax()); err == nil || !strings.Contains(err.Error(), "groups") {
		t.Errorf("32 groups of 32 in a CTA of 512: %v", err)
	}
}
