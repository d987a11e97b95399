package ptx_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// stKernel sums the words of row i of w (rb bytes) into y[i] over groups
// of 32 threads, the row staged first (room bytes).
func stKernel(room int) *k.Kernel { return stKernelW(room, 32) }

// stKernelW is stKernel over groups of threads threads.
func stKernelW(room, threads int) *k.Kernel {
	b := k.New("st")
	w, y := b.Buffer("w", k.U8), b.Buffer("y", k.U32)
	rb := b.Scalar("rb", k.Int)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		b.Stage(w, i.Mul(rb), rb, room)
		row := b.View("row", w, i.Mul(rb), 64)
		b.Store(y, i, b.Sum("s", k.U32, 0, 16, func(j k.Expr) k.Expr { return row.Aligned(k.U32, j.Mul(4)) }))
	})
	b.Schedule("s_i", k.LoopSchedule{Threads: threads})
	return b.MustBuild()
}

// A group wider than a warp is launched as the whole CTA (Launch.CTA), so
// a kernel of such groups, alone or as phases, has one slot a CTA: the
// stages planned and rendered alike (stop 34: a phased kernel of 64-thread
// groups was planned for CTAs of 128 and rendered for 64, and failed to
// render; a plain one set aside twice the shared memory its CTA used).
func TestStageSlotsFitTheCTA(t *testing.T) {
	all := func(*k.Kernel) bool { return true }
	pk, err := k.Phases("two", stKernelW(256, 64), stKernelW(512, 64))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		k    *k.Kernel
		tg   ptx.Target
		want int // one slot: the largest stage's room (twice copying ahead)
	}{{stKernelW(256, 64), ptx.Target{SM: 90, Dependent: all}, 256}, {stKernelW(256, 64), ptx.Target{SM: 90, StageAhead: true}, 512},
		{pk, ptx.Target{SM: 90, Dependent: all}, 512}, {pk, ptx.Target{SM: 90, Dependent: all, StageAhead: true}, 1024}} {
		l, err := ptx.Plan(c.k, c.tg)
		if err != nil {
			t.Fatal(err)
		}
		src, err := ptx.Render(c.k, c.tg)
		if err != nil {
			t.Fatalf("%s, %+v: %v", c.k.Name, c.tg, err)
		}
		if l.Stages != c.want || l.CTA(4096, 128) != 64 || !strings.Contains(src, ".maxntid 64, 1, 1") {
			t.Errorf("%s, %+v: stages %d (want %d), CTA %d, bound %v", c.k.Name, c.tg, l.Stages, c.want, l.CTA(4096, 128), strings.Contains(src, ".maxntid 64, 1, 1"))
		}
	}
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
	for _, want := range []string{".maxntid 128, 1, 1", "// stages: 1024 bytes", ".extern .shared .align 16 .b8 stages_p0_st[];", ", 512;", "cvta.shared.u64", "selp.b64", "bar.warp.sync"} {
		if !strings.Contains(src, want) {
			t.Errorf("no %q in:\n%s", want, src)
		}
	}
	if strings.Contains(src, "ld.global.u32") {
		t.Errorf("a staged buffer read with a global load:\n%s", src)
	}
	// the launch passes the stages' dynamic shared memory; a plain
	// target's has none
	for _, c := range []struct {
		tg   ptx.Target
		want int
	}{{ptx.Target{SM: 90, Dependent: all}, 1024}, {ptx.Target{SM: 90, Dependent: all, StageAhead: true}, 2048}, {ptx.Target{SM: 90}, 0}, {ptx.Target{SM: 80, StageAhead: true}, 2048}} {
		l, err := ptx.Plan(stKernel(256), c.tg)
		if err != nil {
			t.Fatal(err)
		}
		if l.Stages != c.want || l.Shared != 0 || l.CTA(4096, 128) != 128 {
			t.Errorf("%+v: stages %d (want %d), shared %d, CTA %d", c.tg, l.Stages, c.want, l.Shared, l.CTA(4096, 128))
		}
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
	if !strings.Contains(one, "cp.async.cg.shared.global") || strings.Contains(one, "bar.warp.sync") || !strings.Contains(one, "// stages: 2048 bytes") {
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
	if phase < 0 || second < phase || barrier < second || !strings.Contains(src, "// stages: 2048 bytes") {
		t.Errorf("phase 1 at %d: its copies at %d, its barrier at %d:\n%s", phase, second, barrier, src)
	}
}

// StageAhead: the loop's prologue copies the first iteration's range
// before the wait, each iteration copies the next one's into the other
// half of its region (twice the shared memory) and waits for all but that
// newest group before reading its own; a phase after the first copies its
// first iteration before its barrier. A stage outside the body's leading
// run is copied as without StageAhead.
func TestStageAheadRenders(t *testing.T) {
	all := func(*k.Kernel) bool { return true }
	src, err := ptx.Render(stKernel(256), ptx.Target{SM: 90, Dependent: all, StageAhead: true})
	if err != nil {
		t.Fatal(err)
	}
	first := strings.Index(src, "cp.async.cg.shared.global")
	commit := strings.Index(src, "cp.async.commit_group")
	wait := strings.Index(src, "griddepcontrol.wait")
	next := strings.Index(src[wait+1:], "cp.async.cg.shared.global") + wait + 1
	commit2 := strings.Index(src[next:], "cp.async.commit_group") + next
	landed := strings.Index(src, "cp.async.wait_group 1")
	load := strings.Index(src, "ld.u32")
	if first < 0 || commit < first || wait < commit || next < wait || commit2 < next || landed < commit2 || load < landed {
		t.Errorf("first copies %d, commit %d, wait %d, next copies %d, commit %d, wait_group %d, first generic load %d:\n%s",
			first, commit, wait, next, commit2, landed, load, src)
	}
	for _, want := range []string{"// stages: 2048 bytes", "xor.b64", ".maxntid 128, 1, 1"} {
		if !strings.Contains(src, want) {
			t.Errorf("no %q in:\n%s", want, src)
		}
	}
	if strings.Contains(src, "cp.async.wait_all") || strings.Contains(src, "ld.global.u32") {
		t.Errorf("copied ahead, yet waits for every copy or reads w where it lies:\n%s", src)
	}
	// without a wait the copies ahead still overlap each iteration
	nowait, err := ptx.Render(stKernel(256), ptx.Target{SM: 80, StageAhead: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(nowait, "griddepcontrol") || !strings.Contains(nowait, "cp.async.wait_group 1") {
		t.Errorf("sm_80, no dependent launch: not copied ahead:\n%s", nowait)
	}
	pk, err := k.Phases("two", stKernel(256), stKernel(512))
	if err != nil {
		t.Fatal(err)
	}
	ph, err := ptx.Render(pk, ptx.Target{SM: 80, StageAhead: true})
	if err != nil {
		t.Fatal(err)
	}
	phase := strings.Index(ph, "// phase 1")
	barrier := strings.Index(ph[phase:], "atom.acq_rel.gpu.global.add.u32") + phase
	copies := strings.Index(ph[phase:], "cp.async.cg.shared.global") + phase
	if phase < 0 || copies < phase || barrier < copies || !strings.Contains(ph, "// stages: 4096 bytes") || strings.Count(ph, "cp.async.wait_group 1") != 2 {
		t.Errorf("phase 1 at %d: its first copies at %d, its barrier at %d:\n%s", phase, copies, barrier, ph)
	}
	// two runs of stages a let apart: copied as before (the next
	// iteration's copies are issued once, at the end of one run)
	sb := k.New("split")
	sw, su, sy := sb.Buffer("w", k.U8), sb.Buffer("u", k.U8), sb.Buffer("y", k.U32)
	sb.ParallelFor("i", 0, sy.Len(), func(i k.Expr) {
		sb.Stage(sw, i.Mul(64), 64, 64)
		at := sb.Let("at", i.Mul(64))
		sb.Stage(su, at, 64, 64)
		sb.Store(sy, i, sb.View("a", sw, at, 64).Aligned(k.U32, k.I(0)).Add(sb.View("b", su, at, 64).Aligned(k.U32, k.I(0))))
	})
	split, err := ptx.Render(sb.MustBuild(), ptx.Target{SM: 90, Dependent: all, StageAhead: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(split, "cp.async.wait_group") || !strings.Contains(split, "cp.async.wait_all") {
		t.Errorf("stages a let apart copied ahead:\n%s", split)
	}
	// a stage after a store is not in the leading run: copied as before
	// (a phase after the first, which has no prologue then)
	b := k.New("late")
	w, y := b.Buffer("w", k.U8), b.Buffer("y", k.U32)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		b.Store(y, i, k.Const(k.U32, 0))
		b.Stage(w, i.Mul(64), 64, 64)
		row := b.View("row", w, i.Mul(64), 64)
		b.Store(y, i, row.Aligned(k.U32, k.I(0)))
	})
	lk, err := k.Phases("late2", stKernel(256), b.MustBuild())
	if err != nil {
		t.Fatal(err)
	}
	late, err := ptx.Render(lk, ptx.Target{SM: 80, StageAhead: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(late, "cp.async.wait_group 1") != 1 || strings.Count(late, "cp.async.wait_all") != 1 {
		t.Errorf("a stage past the leading run copied ahead (or the first phase's not):\n%s", late)
	}
}
