package ptx

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
)

// ffnPhases is a llama block's feed-forward half as one phased kernel: the
// norm and its quantizer, the SwiGLU, the quantizer, the down projection
// with the residual (the mat-vecs prefetching their weight rows).
func ffnPhases(t *testing.T) *kernel.Kernel {
	t.Helper()
	k, err := kernel.Phases("FFN",
		ops.RMSNormQuantize(256),
		ops.DotMatVec("SwiGLU", "Q4_K", ops.DotShape{Prefetch: true}),
		ops.QuantizeQ8_K(),
		ops.DotMatVec("Add", "Q4_K", ops.DotShape{Rows: 2, Prefetch: true}))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A phased kernel renders as one entry: each phase's loop in turn, a grid
// barrier between them, and a phase's first weight prefetches before the
// barrier that starts it (so the CTAs done early stream them).
func TestRenderPhases(t *testing.T) {
	k := ffnPhases(t)
	for _, dep := range []bool{false, true} {
		tg := Target{SM: 90}
		if dep {
			tg.Dependent = func(*kernel.Kernel) bool { return true }
		}
		src, err := Render(k, tg)
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, src, []*kernel.Kernel{k}, 90)
		if n := strings.Count(src, ".visible .entry "); n != 1 {
			t.Fatalf("%d entries, want one", n)
		}
		// the stretches between barriers: phase 0 and phase 1's
		// prefetches, phase 1, phase 2 and phase 3's prefetches, phase 3
		segs := strings.Split(src, "atom.acq_rel.gpu.global.add.u32")
		if len(segs) != 4 {
			t.Fatalf("%d grid barriers, want 3", len(segs)-1)
		}
		for i, want := range []int{2, 0, 1, 0} { // SwiGLU's two matrices, the down projection's one
			if n := strings.Count(segs[i], "prefetch.global.L2"); n != want {
				t.Errorf("dependent %v: %d prefetches before barrier %d, want %d", dep, n, i+1, want)
			}
		}
		// the norm stages its weights first: it waits after its copies
		// and again after its loop (a group without iterations met no wait)
		if n := strings.Count(src, "griddepcontrol.wait"); n != map[bool]int{false: 0, true: 2}[dep] {
			t.Errorf("dependent %v: %d waits", dep, n)
		}
		if dep && strings.Index(src, "griddepcontrol.wait") > strings.Index(src, "ld.global") {
			t.Errorf("a load before the wait for the kernel before")
		}
	}
	// a first phase that prefetches waits after its prefetches and again
	// after its loop (a group without iterations met no wait)
	pre, err := kernel.Phases("PrefetchFirst", ops.DotMatVec("Add", "Q4_K", ops.DotShape{Rows: 2, Prefetch: true}), ops.RMSNormQuantize(256))
	if err != nil {
		t.Fatal(err)
	}
	src, err := Render(pre, Target{SM: 90, Dependent: func(*kernel.Kernel) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if n, at := strings.Count(src, "griddepcontrol.wait"), strings.Index(src, "griddepcontrol.wait"); n != 2 || at < strings.Index(src, "prefetch.global.L2") {
		t.Errorf("a prefetching first phase: %d waits, the first after its prefetch: %v", n, at > strings.Index(src, "prefetch.global.L2"))
	}
	// the other barriers: a backed-off spin; a count that only grows (one
	// returning atomic a launch, reductions after)
	for _, c := range []struct {
		barrier string
		want    map[string]int
	}{
		{"sleep", map[string]int{"nanosleep.u32": 3, "atom.acq_rel.gpu.global.add.u32": 3}},
		{"count", map[string]int{"atom.acq_rel.gpu.global.add.u64": 1, "red.release.gpu.global.add.u64": 2, "nanosleep": 0, "fence.acq_rel.gpu": 6}},
		{"bare", map[string]int{"atom.acq_rel.gpu.global.add.u64": 1, "red.release.gpu.global.add.u64": 2, "fence": 0}},
	} {
		src, err := Render(k, Target{SM: 90, PhaseBarrier: c.barrier})
		if err != nil {
			t.Fatal(err)
		}
		wellFormed(t, src, []*kernel.Kernel{k}, 90)
		for ins, n := range c.want {
			if got := strings.Count(src, ins); got != n {
				t.Errorf("barrier %q: %d %s, want %d", c.barrier, got, ins, n)
			}
		}
	}
	if _, err := Render(k, Target{SM: 90, PhaseBarrier: "spin"}); err == nil {
		t.Errorf("an unknown barrier rendered")
	}
	// the launch's CTA for ptxas, and an occupancy asked for
	if src, err := Render(k, Target{SM: 90, PhaseCTAs: 3}); err != nil || !strings.Contains(src, ")\n.maxntid 256, 1, 1\n.minnctapersm 3\n{") {
		t.Errorf("no .maxntid 256 and .minnctapersm 3 (%v)", err)
	}
	l, err := Plan(k, Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	if l.Group != 256 || !l.Resident || l.Shared != 0 {
		t.Errorf("launch %+v, want CTAs of 256 (the norm's), resident", l)
	}
	// the most threads a phase keeps busy: the SwiGLU's 14336 rows a warp each
	n, err := Threads(k, Target{SM: 90}, Elems(4096), Elems(4096), Elems(4096), Elems(16), float32(1e-5),
		Elems(14336*2304), Elems(14336*2304), Elems(4096+256), Elems(16), Elems(14336),
		Elems(14336), Elems(14336+14336/256*32), Elems(14336/256),
		Elems(4096*8064), Elems(14336+14336/256*32), Elems(14336/256), Elems(4096), Elems(4096), Elems(2))
	if err != nil || n != 14336*32 {
		t.Errorf("Threads %d, %v; want %d", n, err, 14336*32)
	}
	// groups wider than a warp and narrower than the CTA (a Q6_K mat-vec's
	// 128 beside the norm's 256) each sync on a named barrier of their own
	// and reduce in their own slots
	mixed, err := kernel.Phases("Mixed", ops.RMSNormQuantize(256), ops.DotMatVec("", "Q6_K", ops.DotShape{Threads: 128}))
	if err != nil {
		t.Fatal(err)
	}
	src, err = Render(mixed, Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	wellFormed(t, src, []*kernel.Kernel{mixed}, 90)
	phase1 := src[strings.Index(src, "// phase 1"):]
	if n := strings.Count(phase1, "bar.sync 0;"); n != 2 || !regexp.MustCompile(`bar\.sync %r\d+, 128;`).MatchString(phase1) {
		t.Errorf("phase of 128 in a CTA of 256: %d CTA barriers (want the grid barrier's 2), named barriers of 128: %v", n, regexp.MustCompile(`bar\.sync %r\d+, 128;`).MatchString(phase1))
	}
	if _, err := Render(func() *kernel.Kernel {
		k, _ := kernel.Phases("TooMany", groupSum(1024), groupSum(64))
		return k
	}(), Target{SM: 90}); err == nil || !strings.Contains(err.Error(), "at most 15") {
		t.Errorf("16 groups of 64 to a CTA: %v", err)
	}
}
