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
	if strings.Contains(src, ".minnctapersm") {
		t.Errorf("a register budget not asked for")
	}
	// LocalWarps: CTAs to hold that many warps a multiprocessor
	lp2, err := k.LocalPhases("rowsMax2", 256, []int{0, 1}, pfKernel(false), blockMaxKernel())
	if err != nil {
		t.Fatal(err)
	}
	if src, err := ptx.Render(lp2, ptx.Target{SM: 90, LocalWarps: 32}); err != nil || !strings.Contains(src, ".maxntid 256, 1, 1\n.minnctapersm 4\n") {
		t.Errorf("LocalWarps 32 over CTAs of 8 warps: no .minnctapersm 4 (%v)", err)
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

// A local phased kernel's first phase stages as a kernel does: its copies
// before the wait, slots for the CTA's groups in Launch.Stages; the later
// phases copy nothing.
func TestLocalPhasesStage(t *testing.T) {
	b := k.New("stagedRows")
	w, y := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	n := b.Scalar("n", k.Int)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		b.Stage(w, i.Mul(n), n, 256)
		b.Store(y, i, b.Sum("s", k.F32, 0, n, func(j k.Expr) k.Expr { return w.At(i.Mul(n).Add(j)) }))
	})
	b.Schedule("s_i", k.LoopSchedule{Threads: 32})
	lp, err := k.LocalPhases("stagedMax", 1024, []int{0, 1}, b.MustBuild(), blockMaxKernel())
	if err != nil {
		t.Fatal(err)
	}
	all := func(*k.Kernel) bool { return true }
	tg := ptx.Target{SM: 90, Dependent: all}
	src, err := ptx.Render(lp, tg)
	if err != nil {
		t.Fatal(err)
	}
	cp, wait, phase1 := strings.Index(src, "cp.async"), strings.Index(src, "griddepcontrol.wait"), strings.Index(src, "// phase 1")
	if cp < 0 || wait < cp || phase1 < wait || strings.Contains(src[phase1:], "cp.async") {
		t.Errorf("the first phase's copies at %d, its wait at %d, phase 1 at %d", cp, wait, phase1)
	}
	l, err := ptx.Plan(lp, tg)
	if err != nil {
		t.Fatal(err)
	}
	if l.Stages != 32*256*4 { // 32 groups of a CTA of 1024, 256 floats each
		t.Errorf("stages %d bytes a CTA, want %d", l.Stages, 32*256*4)
	}
}

// A block epilogue (kernel.BlockEpilogue) renders the producer's grid
// loop and, after each group, its fenced count and the completing group's
// epilogue; its launch is the producer's (any grid, not resident).
func TestBlockEpilogueRender(t *testing.T) {
	be, err := k.BlockEpilogue("rowsMax", 32, 1, pfKernel(false), blockMaxKernel())
	if err != nil {
		t.Fatal(err)
	}
	all := func(*k.Kernel) bool { return true }
	src, err := ptx.Module([]*k.Kernel{be}, ptx.Target{SM: 90, Dependent: all})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fence.acq_rel.gpu", "atom.acq_rel.gpu.global.add.u32", "shfl.sync.idx.b32", "ld.acquire.gpu.global.u32", "griddepcontrol.wait"} {
		if !strings.Contains(src, want) {
			t.Errorf("no %s:\n%s", want, src)
		}
	}
	if strings.Count(src, "atom.") != 1 || strings.Contains(src, "bar.sync") {
		t.Errorf("not one count a group, or a CTA barrier:\n%s", src)
	}
	l, err := ptx.Plan(be, ptx.Target{SM: 90})
	if err != nil || l.Resident || l.Group != 32 {
		t.Errorf("launch %+v (%v)", l, err)
	}
	bad, err := k.BlockEpilogue("wide", 32, 1, stKernelW(256, 64), blockMaxKernel())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ptx.Module([]*k.Kernel{bad}, ptx.Target{SM: 90}); err == nil {
		t.Error("groups of 32 and of 64: rendered")
	}
}
