package ptx_test

import (
	"math"
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// blockMaxKernel: m[b] = the largest of y's block b of 32, a warp a block.
func blockMaxKernel() *k.Kernel {
	b := k.New("blockMax")
	y, m := b.Buffer("y", k.F32), b.Buffer("m", k.F32)
	b.ParallelFor("b", 0, m.Len(), func(i k.Expr) {
		acc := b.Acc("mx", k.OpMax, k.F(math.Inf(-1)))
		b.For("j", 0, 32, func(j k.Expr) { b.Fold(acc, y.At(i.Mul(32).Add(j))) })
		b.Store(m, i, acc.Get())
	})
	b.Schedule("j", k.LoopSchedule{Threads: 32})
	return b.MustBuild()
}

// CTA-local phases render as one entry whose phases a CTA barrier parts
// (no grid barrier, no barrier words), the later phase's share of groups
// a CTA in its loop (the idle groups' first iteration past the bound), the
// wait for the kernel before in the first phase only, for CTAs of exactly
// the kernel's; Plan asks for that CTA.
func TestLocalPhasesRender(t *testing.T) {
	lp, err := k.LocalPhases("rowsMax", 1024, []int{0, 1}, pfKernel(false), blockMaxKernel())
	if err != nil {
		t.Fatal(err)
	}
	all := func(*k.Kernel) bool { return true }
	src, err := ptx.Render(lp, ptx.Target{SM: 90, Dependent: all})
	if err != nil {
		t.Fatal(err)
	}
	phase1 := strings.Index(src, "// phase 1")
	if phase1 < 0 || !strings.Contains(src[phase1:], "bar.sync 0") || strings.Contains(src, "atom.") || strings.Contains(src, "fence") {
		t.Errorf("no CTA barrier before phase 1, or a grid barrier:\n%s", src)
	}
	if strings.Count(src, "griddepcontrol.wait") != 1 || strings.Index(src, "griddepcontrol.wait") > phase1 {
		t.Errorf("the wait is not the first phase's alone")
	}
	if !strings.Contains(src[phase1:], ", 1;") || !strings.Contains(src[phase1:], "selp.b64") || !strings.Contains(src, ".maxntid 1024, 1, 1") {
		t.Errorf("phase 1's share of one group a CTA is not rendered:\n%s", src[phase1:])
	}
	l, err := ptx.Plan(lp, ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	if l.CTA(1<<20, 128) != 1024 || l.Resident {
		t.Errorf("launch %+v: CTA %d", l, l.CTA(1<<20, 128))
	}
	if _, err := k.LocalPhases("small", 32, []int{0, 1}, pfKernel(false), blockMaxKernel()); err == nil {
		t.Error("a CTA of 32: no error")
	}
}

// The driver's PTX assembler takes ASCII only, comments included.
func TestLocalPhasesASCII(t *testing.T) {
	lp, err := k.LocalPhases("rowsMax", 1024, []int{0, 1}, pfKernel(false), blockMaxKernel())
	if err != nil {
		t.Fatal(err)
	}
	src, err := ptx.Render(lp, ptx.Target{SM: 90, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range src {
		if c > 127 {
			t.Fatalf("non-ASCII %q at byte %d", c, i)
		}
	}
}
