// Package ptx renders kernels of dsl/kernel as PTX (the NVIDIA virtual ISA)
// text that the CUDA driver JIT-compiles: one .visible .entry per kernel,
// bit-identical to the interpreter for every op except the transcendental
// functions, whose documented error is far below an f32 ulp (docs/ptx.md).
//
// The target follows the renderer layout of dsl/kernel/gosrc: caps.go says
// what the target has, rules.go how the IR and its schedule map onto it, and
// emit.go/expr.go/math.go write the instructions.
package ptx

import (
	"fmt"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// Caps of the PTX target, which the rules follow:
//   - a grid of threads: one ParallelFor at the top of a kernel is spread
//     over them (a grid-stride loop, so any launch shape is correct);
//   - warps of 32 and barriers per CTA, used only where every thread of a
//     CTA reaches them (the IR has no shared memory to order);
//   - IEEE f32/f64 add, mul, div, sqrt and fma with explicit rounding (.rn
//     also stops ptxas contracting a mul and an add into an fma);
//   - no correctly rounded exp/log/sin/cos/pow: they are f64 sequences in
//     math.go, accurate to about an f64 ulp, then rounded once;
//   - no 8- or 16-bit arithmetic: such kinds live wrapped in 32-bit
//     registers and are re-wrapped after ops that can leave their range.

// Target is the GPU generation code is rendered for.
type Target struct {
	SM       int             // compute capability ×10: 80 for sm_80, 90 for sm_90
	Version  string          // PTX ISA version; "" picks the lowest covering SM (7.8 up to sm_90)
	Schedule kernel.Schedule // overrides the kernels' default schedules
	// Dependent picks the kernels rendered for programmatic dependent
	// launch (sm_90 on, prefetch.go; nil: none): such a kernel waits for
	// the kernel before it (griddepcontrol.wait) at entry, or after its
	// weights' prefetches, and lets the kernel after it launch from there.
	Dependent func(*kernel.Kernel) bool
	// LaunchEarly picks dependent kernels that let the kernel after them
	// launch at entry, before their own wait (griddepcontrol.launch_dependents
	// first): a light kernel before a staged mat-vec, whose CTAs then copy
	// their rows while the kernel two back still finishes. The wait after
	// is unchanged (the kernel before has completed), so it never changes a
	// result; only where the CTAs start.
	LaunchEarly func(*kernel.Kernel) bool
	// WGMMA renders block products (kernel.SBlockMatMul) with sm_90a's
	// warpgroup MMA (wgmma.mma_async from shared-memory descriptors)
	// instead of mma.sync; the module then targets sm_90a (PTX 8.0), which
	// only sm_90 devices load.
	WGMMA bool
	// WGMMAOverlap (with WGMMA) keeps a stage's products in flight while
	// the copies of the stage after next are issued (wgmma.wait_group 1,
	// then the refill of the stage the products before it read), where
	// plain WGMMA waits for each stage's products first.
	WGMMAOverlap bool
	// PhaseCTAs, where set, asks ptxas to fit that many CTAs of a phased
	// kernel on a multiprocessor (.minnctapersm: a register budget, the
	// widest phase's no longer setting the whole kernel's occupancy).
	PhaseCTAs int
	// LocalWarps, where set, asks ptxas to fit CTAs of a local phased
	// kernel (kernel.LocalPhases) holding that many warps on a
	// multiprocessor (.minnctapersm LocalWarps over the CTA's warps): a
	// register budget, occupancy against spills.
	LocalWarps int
	// MinCTAs, where set and above 1 for a kernel, asks ptxas to fit that
	// many of its CTAs on a multiprocessor (.minnctapersm: a register
	// budget), so that a grid a little over one wave at the registers
	// ptxas would pick runs in one.
	MinCTAs func(*kernel.Kernel) int
	// PhaseBarrier picks a phased kernel's grid barrier (phases.go): ""
	// a generation word moved by the last CTA to arrive, "sleep" the same
	// with a backed-off spin, "count" a 64-bit count of arrivals that only
	// grows (one returning atomic a launch, then reductions), whose words
	// must serve one launch site (one grid size) only; "bare" the count
	// without fences around it, the CTA's barrier and the count's release
	// and acquire alone ordering the phases.
	PhaseBarrier string
	// StageOnce copies a kernel.Stage's range only in a group's first
	// grid iteration, the one whose copies overlap the wait or barrier
	// before it; later iterations read where the data lies (a launch of
	// several waves then streams as it would unstaged).
	StageOnce bool
	// StageAhead has each grid iteration of a staged loop copy the next
	// iteration's ranges into a second slot while it computes on the
	// current one's (cp.async.wait_group 1): a grid that walks several
	// groups each (a phased kernel's resident grid) streams its rows
	// without a round trip at each; the first iteration's copies go before
	// the wait or barrier. The slots take twice the shared memory.
	StageAhead bool
	// Trace has every CTA record when it started, when its wait for the
	// kernel before returned and when it was done (trace.go): a
	// diagnostic of where a step's time goes.
	Trace bool
}

// ForDevice is the target of a device of compute capability major.minor.
func ForDevice(major, minor int) Target { return Target{SM: 10*major + minor} }

// version is the .version line's number. sm_70 is the floor: shfl.sync and
// the independent thread scheduling model start there.
func (t Target) version() (string, error) {
	switch {
	case t.SM < 70:
		return "", fmt.Errorf("ptx: sm_%d unsupported (need sm_70 or later)", t.SM)
	case t.WGMMA && t.SM != 90:
		return "", fmt.Errorf("ptx: wgmma is sm_90a's (target sm_%d)", t.SM)
	case t.Version != "":
		return t.Version, nil
	case t.WGMMA:
		return "8.0", nil
	case t.SM <= 90:
		return "7.8", nil
	case t.SM <= 101:
		return "8.6", nil
	}
	return "8.7", nil
}

// arch is the .target line's architecture: sm_90a where wgmma is used.
func (t Target) arch() string {
	if t.WGMMA {
		return fmt.Sprintf("sm_%da", t.SM)
	}
	return fmt.Sprintf("sm_%d", t.SM)
}
