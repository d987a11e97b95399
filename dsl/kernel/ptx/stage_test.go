package ptx_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// stKernel sums the words of row i of w (rb bytes) into y[i] over groups
// of 32 threads, the row staged first (room bytes).
func stKernel(room int) *k.Kernel {
	b := k.New("st")
	w, y := b.Buffer("w", k.U8), b.Buffer("y", k.U32)
	rb := b.Scalar("rb", k.Int)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		b.Stage(w, i.Mul(rb), rb, room)
		row := b.View("row", w, i.Mul(rb), 64)
		b.Store(y, i, b.Sum("s", k.U32, 0, 16, func(j k.Expr) k.Expr { return row.Aligned(k.U32, j.Mul(4)) }))
	})
	b.Schedule("s_i", k.LoopSchedule{Threads: 32})
	return b.MustBuild()
}

// A staged kernel rendered for dependent launch copies its group's range
// into its slot (cp.async, 16 bytes a lane a trip, 512 bytes apart) before
// its wait, then waits for its copies, meets its warp and reads the buffer
// through generic loads; the slots are the CTA's four warps' (.maxntid
// 128). Without a wait to hide (no dependent launch, a plain phase-less
// kernel) it renders no copies and reads w as before.
func TestStageRenders(t *testing.T) {
	all := func(*k.Kernel) bool { return true }
	src, err := ptx.Render(stKernel(256), ptx.Target{SM: 90, Dependent: all})
	if err != nil {
		t.Fatal(err)
	}
	cp := strings.Index(src, "cp.async.cg.shared.global")
	commit := strings.Index(src, "cp.async.commit_group")
	wait := strings.Index(src, "griddepcontrol.wait")
	done := strings.Index(src, "cp.async.wait_all")
	load := strings.Index(src, "ld.u32")
	if cp < 0 || commit < cp || wait < commit || done < wait || load < done {
		t.Errorf("copies at %d, commit %d, wait %d, copies waited for %d, first generic load %d:\n%s", cp, commit, wait, done, load, src)
	}
	for _, want := range []string{".maxntid 128, 1, 1", ".shared .align 16 .b8 stages_p0_st[1024]", ", 512;", "cvta.shared.u64", "selp.b64", "bar.warp.sync"} {
		if !strings.Contains(src, want) {
			t.Errorf("no %q in:\n%s", want, src)
		}
	}
	if strings.Contains(src, "ld.global.u32") {
		t.Errorf("a staged buffer read with a global load:\n%s", src)
	}
	// a thread alone stages too (a slot a thread, no group to meet)
	b := k.New("st1")
	w1, y1 := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	b.ParallelFor("i", 0, y1.Len(), func(i k.Expr) {
		b.Stage(w1, i.Mul(4), 4, 4)
		b.Store(y1, i, w1.At(i.Mul(4)).Add(w1.At(i.Mul(4).Add(3))))
	})
	one, err := ptx.Render(b.MustBuild(), ptx.Target{SM: 90, Dependent: all})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(one, "cp.async.cg.shared.global") || strings.Contains(one, "bar.warp.sync") || !strings.Contains(one, ".b8 stages_p0_st1[2048]") {
		t.Errorf("a thread's stage:\n%s", one)
	}
	// StageOnce: only a group's first iteration copies (a predicate set
	// before the grid loop and cleared after its stage)
	once, err := ptx.Render(stKernel(256), ptx.Target{SM: 90, Dependent: all, StageOnce: true})
	if err != nil {
		t.Fatal(err)
	}
	if d := strings.Count(once, "and.pred") - strings.Count(src, "and.pred"); d != 1 || strings.Count(once, "setp.ne.u32") <= strings.Count(src, "setp.ne.u32") {
		t.Errorf("StageOnce: %d more and.pred, the first iteration's predicate not cleared:\n%s", d, once)
	}
	for _, tg := range []ptx.Target{{SM: 90}, {SM: 80}} {
		plain, err := ptx.Render(stKernel(256), tg)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plain, "cp.async") || strings.Contains(plain, "stages_") || !strings.Contains(plain, "ld.global.u32") {
			t.Errorf("sm_%d, no wait: rendered a stage:\n%s", tg.SM, plain)
		}
	}
	// a phase after the first issues its first iteration's copies before
	// the grid barrier, after the CTA is done with the slots before
	pk, err := k.Phases("two", stKernel(256), stKernel(512))
	if err != nil {
		t.Fatal(err)
	}
	src, err = ptx.Render(pk, ptx.Target{SM: 80})
	if err != nil {
		t.Fatal(err)
	}
	phase := strings.Index(src, "// phase 1")
	barrier := strings.Index(src[phase:], "atom.acq_rel.gpu.global.add.u32") + phase
	second := strings.Index(src[phase:], "cp.async.cg.shared.global") + phase
	if phase < 0 || second < phase || barrier < second || !strings.Contains(src, ".b8 stages_p0_two[2048]") {
		t.Errorf("phase 1 at %d: its copies at %d, its barrier at %d:\n%s", phase, second, barrier, src)
	}
}
