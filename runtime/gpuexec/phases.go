package gpuexec

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// Phased decode steps (kernel.Phases, docs/gpu.md "A persistent decode
// step"): runs of consecutive launches of a one-row step become one
// launch each, its kernels phases that a grid barrier orders, its CTAs all
// resident at once. A mat-vec phase issues its first weight rows'
// prefetches before the barrier that starts it, so CTAs done early stream
// the next weights where a launch boundary leaves the memory idle. The
// results are the launches' own, bit for bit (the phases run in turn).

// phaseLimit is JITLLM_PHASES: the most launches fused into one ("all":
// any number, limit 0); unset, 0 or 1 (the default): off.
func phaseLimit() (limit int, on bool) {
	v := os.Getenv("JITLLM_PHASES")
	if v == "all" {
		return 0, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		return 0, false
	}
	return n, true
}

// phaseCTAs is JITLLM_PHASES_CTAS: the CTAs of a phased kernel asked to
// fit on a multiprocessor (ptx.Target.PhaseCTAs; 0, the default: as
// ptxas allocates).
func phaseCTAs() int {
	return max(envInt("JITLLM_PHASES_CTAS", 0), 0)
}

// phaseBarrier is JITLLM_PHASES_BARRIER: the phased kernels' grid barrier
// (ptx.Target.PhaseBarrier: "", "sleep", "count" or "bare").
func phaseBarrier() string { return os.Getenv("JITLLM_PHASES_BARRIER") }

// phasedPrefetch reports whether every decode mat-vec prefetches its first
// rows (dotShape): in phased steps, unless JITLLM_PHASES_PREFETCH=0.
func phasedPrefetch() bool {
	_, on := phaseLimit()
	return on && os.Getenv("JITLLM_PHASES_PREFETCH") != "0"
}

// phasedUnroll is JITLLM_PHASES_UNROLL in phased steps: the units a
// thread of a decode mat-vec takes a trip (ops.DotShape.Unroll; 0: the
// rule's). A phased kernel's CTAs are only those resident at once and walk
// their rows one after another, so a trip's loads are all a warp has in
// flight.
func phasedUnroll() int {
	if _, on := phaseLimit(); !on {
		return 0
	}
	return max(envInt("JITLLM_PHASES_UNROLL", 0), 0)
}

// cooperative launches phased kernels as cooperative launches (the
// driver's guarantee that every CTA is resident); JITLLM_PHASES_COOP=0
// launches them as any kernel, their grid still sized to fit at once.
var cooperative = os.Getenv("JITLLM_PHASES_COOP") != "0"

// phaseable reports whether k can be a phase on tg: a grid loop without
// block or tile statements, shared memory or phases of its own.
func phaseable(k *kernel.Kernel, tg ptx.Target) bool {
	if len(k.Phases) > 0 || kernel.BlockThreads(k.Body) > 0 || kernel.HasTiles(k.Body) {
		return false
	}
	l, err := ptx.Plan(k, tg)
	return err == nil && l.Loop != "" && l.Shared == 0 && l.Group <= 256
}

// phase fuses each one-row step's runs of up to limit consecutive
// phaseable launches (limit ≤ 0: any length) into phased launches, each
// with barrier words of its own (two U32 words, 8-byte aligned, in one
// allocation: a "count" barrier's words serve one grid size). Kernels are
// made once per sequence of phases.
func (p *plan) phase(tg ptx.Target, limit int) error {
	bars := p.add(alloc{name: "phase barriers", kind: kernel.U32}) // two words a phased launch, sized at the end
	launches := 0
	made := map[string]*kernel.Kernel{}
	can := map[*kernel.Kernel]bool{}
	fuse := func(ls []launch) ([]launch, error) {
		var out, run []launch
		flush := func() error {
			if len(run) < 2 {
				out = append(out, run...)
				run = run[:0]
				return nil
			}
			var key strings.Builder
			var ks []*kernel.Kernel
			args := []any{}
			for _, l := range run {
				fmt.Fprintf(&key, "%p,", l.k)
				ks = append(ks, l.k)
				args = append(args, l.args...)
			}
			k, ok := made[key.String()]
			if !ok {
				var err error
				if k, err = kernel.Phases(fmt.Sprintf("Phases%d_%d", len(made), len(ks)), ks...); err != nil {
					return err
				}
				made[key.String()] = k
			}
			out = append(out, launch{k: k, args: append(args, view{bars, 2 * launches, 2}), node: run[0].node})
			launches++
			run = run[:0]
			return nil
		}
		for _, l := range ls {
			ok, seen := can[l.k]
			if !seen {
				ok = phaseable(l.k, tg)
				can[l.k] = ok
			}
			if !ok || (limit > 0 && len(run) == limit) {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			if !ok {
				out = append(out, l)
				continue
			}
			run = append(run, l)
		}
		if err := flush(); err != nil {
			return nil, err
		}
		return out, nil
	}
	for _, ls := range p.oneRowSteps() {
		var err error
		if *ls, err = fuse(*ls); err != nil {
			return err
		}
	}
	p.allocs[bars].n = 2 * launches
	return nil
}

// residentGrid caps a phased launch's grid at the CTAs of block threads
// that fit on the device at once (a grid barrier waits for every CTA).
func residentGrid(fn *cuda.Function, sms int, grid, block, shared uint32) (uint32, error) {
	n, err := fn.ActiveBlocks(int(block), int(shared))
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("no CTA of %d threads fits on a multiprocessor", block)
	}
	return min(grid, uint32(n*sms)), nil
}
