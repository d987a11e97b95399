package ptx_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// pfKernel sums row i of w (n values) into y[i] over 32 threads, its rows
// prefetched first where prefetch.
func pfKernel(prefetch bool) *k.Kernel {
	b := k.New("pf")
	w, y := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	n := b.Scalar("n", k.Int)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		if prefetch {
			b.Prefetch(w, i.Mul(n), n)
		}
		b.Store(y, i, b.Sum("s", k.F32, 0, n, func(j k.Expr) k.Expr { return w.At(i.Mul(n).Add(j)) }))
	})
	b.Schedule("s_i", k.LoopSchedule{Threads: 32})
	return b.MustBuild()
}

// A kernel rendered for dependent launch waits for the kernel before it
// after its prefetches (the lines of its rows, a lane each) or at entry
// without any, and lets the next launch right after; rendered otherwise it
// has neither (and prefetches nothing). sm_80 cannot; a load before the
// first prefetch is refused.
func TestDependentRenders(t *testing.T) {
	all := func(*k.Kernel) bool { return true }
	for _, pf := range []bool{true, false} {
		src, err := ptx.Render(pfKernel(pf), ptx.Target{SM: 90, Dependent: all})
		if err != nil {
			t.Fatal(err)
		}
		wait := strings.Index(src, "griddepcontrol.wait")
		next := strings.Index(src, "griddepcontrol.launch_dependents")
		first := strings.Index(src, "ld.global")
		if wait < 0 || next < wait || first < next || strings.Count(src, "griddepcontrol.wait") != 1 {
			t.Errorf("prefetch %v: wait at %d, launch_dependents at %d, first load at %d", pf, wait, next, first)
		}
		if p := strings.Index(src, "prefetch.global.L2"); pf != (p >= 0) || (pf && p > wait) {
			t.Errorf("prefetch %v: the prefetch at %d, the wait at %d", pf, p, wait)
		}
		if pf && !strings.Contains(src, ", 4096;") { // 32 lanes × 128-byte lines
			t.Errorf("the lanes do not stride the lines:\n%s", src)
		}
		plain, err := ptx.Render(pfKernel(pf), ptx.Target{SM: 90})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plain, "griddepcontrol") || strings.Contains(plain, "prefetch.global") {
			t.Errorf("prefetch %v, no dependent launch: rendered its waits or prefetches", pf)
		}
	}
	if _, err := ptx.Render(pfKernel(true), ptx.Target{SM: 80, Dependent: all}); err == nil || !strings.Contains(err.Error(), "sm_90") {
		t.Errorf("sm_80: %v", err)
	}
	b := k.New("late")
	w, y := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		x := b.Let("x", w.At(i))
		b.Prefetch(w, i, 1)
		b.Store(y, i, x)
	})
	if _, err := ptx.Render(b.MustBuild(), ptx.Target{SM: 90, Dependent: all}); err == nil || !strings.Contains(err.Error(), "before the first prefetch") {
		t.Errorf("a load before the prefetch: %v", err)
	}
	// a settled buffer (no kernel beside writes it) is read before the
	// prefetch it sizes, and so before the wait
	b = k.New("settled")
	w, y = b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	at := b.Buffer("at", k.I32).Settle()
	b.ParallelFor("i", 0, y.Len(), func(i k.Expr) {
		o := b.Let("o", at.At(0).Cvt(k.Int).Add(i))
		b.Prefetch(w, o, 1)
		b.Store(y, i, w.At(o))
	})
	src, err := ptx.Render(b.MustBuild(), ptx.Target{SM: 90, Dependent: all})
	if err != nil {
		t.Fatal(err)
	}
	load, wait := strings.Index(src, "ld.global.s32"), strings.Index(src, "griddepcontrol.wait")
	if load < 0 || wait < load || strings.Index(src, "prefetch.global.L2") > wait || strings.Index(src, "ld.global.f32") < wait {
		t.Errorf("settled load at %d, wait at %d: only the settled load and the prefetch before the wait:\n%s", load, wait, src)
	}
}

// A loop of nothing but prefetches (a column's strided rows) is issued
// whole before the wait: the wait follows the loop's last trip, once, not
// its first (a wait inside it made every trip after the first wait too).
func TestPrefetchLoopBeforeWait(t *testing.T) {
	b := k.New("strided")
	w, y := b.Buffer("w", k.F32), b.Buffer("y", k.F32)
	n := b.Scalar("n", k.Int)
	b.ParallelFor("c", 0, y.Len(), func(c k.Expr) {
		b.For("r", 0, n, func(r k.Expr) {
			b.Prefetch(w, r.Mul(y.Len()).Add(c), 1)
		})
		b.Store(y, c, b.Sum("s", k.F32, 0, n, func(r k.Expr) k.Expr { return w.At(r.Mul(y.Len()).Add(c)) }))
	})
	src, err := ptx.Render(b.MustBuild(), ptx.Target{SM: 90, Dependent: func(*k.Kernel) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	wait, pf := strings.Index(src, "griddepcontrol.wait"), strings.Index(src, "prefetch.global.L2")
	if pf < 0 || wait < pf || strings.Count(src, "griddepcontrol.wait") != 1 || strings.Index(src, "ld.global") < wait {
		t.Fatalf("prefetch at %d, the wait at %d:\n%s", pf, wait, src)
	}
	// the loops around the wait: labels placed before it that a branch
	// after it returns to; only the grid's loop over c may be one
	around := 0
	for _, line := range strings.Split(src[:wait], "\n") {
		if l, ok := strings.CutSuffix(strings.TrimSpace(line), ":"); ok && strings.Contains(src[wait:], "bra "+l+";") {
			around++
		}
	}
	if around != 1 {
		t.Errorf("the wait is inside %d loops, want the grid's alone:\n%s", around, src)
	}
}

// Target.LaunchEarly lets the next kernel launch at entry, before the
// prefetches and the wait, once; a kernel it does not pick keeps the
// launch after its wait.
func TestLaunchEarlyRenders(t *testing.T) {
	all := func(*k.Kernel) bool { return true }
	for _, pf := range []bool{true, false} {
		src, err := ptx.Render(pfKernel(pf), ptx.Target{SM: 90, Dependent: all, LaunchEarly: all})
		if err != nil {
			t.Fatal(err)
		}
		next := strings.Index(src, "griddepcontrol.launch_dependents")
		wait := strings.Index(src, "griddepcontrol.wait")
		p := strings.Index(src, "prefetch.global.L2")
		if next < 0 || wait < next || (pf && p < next) || strings.Count(src, "griddepcontrol.launch_dependents") != 1 {
			t.Errorf("prefetch %v: launch_dependents at %d, prefetch at %d, wait at %d", pf, next, p, wait)
		}
		none := func(*k.Kernel) bool { return false }
		late, err := ptx.Render(pfKernel(pf), ptx.Target{SM: 90, Dependent: all, LaunchEarly: none})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Index(late, "griddepcontrol.launch_dependents") < strings.Index(late, "griddepcontrol.wait") {
			t.Errorf("prefetch %v: not picked, yet launched before the wait", pf)
		}
	}
}
