package ptx

import (
	"fmt"
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// A CTA-local phased kernel (kernel.LocalPhases) is one entry that runs
// each phase's grid loop in turn over the same CTAs with a CTA barrier
// (bar.sync) between: no grid barrier, so any grid is correct and its CTAs
// need not be resident at once. Phase i's loop gives each CTA
// Local.Groups(i) consecutive groups of its iterations, the next after a
// stride of every CTA's; a CTA's groups past that share idle through the
// phase. Only the first phase waits for the kernel before (a dependent
// launch); the later ones read what their own CTA wrote, ordered by the
// barrier. The first phase may stage (kernel.Stage: its copies before its
// wait, slots for the CTA's groups); the later ones read where their data
// lies.

// localEntry renders local phased kernel k, entry id of its module.
func localEntry(k *kernel.Kernel, t Target, id int) (string, error) {
	ps, _, err := lowerPhases(k, t)
	if err != nil {
		return "", err
	}
	cta := k.Local.CTA
	wide := false
	for _, p := range ps {
		switch {
		case p.width > cta:
			return "", fmt.Errorf("ptx: kernel %s: phase %s's groups of %d in a CTA of %d", k.Name, p.k.Name, p.width, cta)
		case p.width > 32 && cta/p.width > 15:
			return "", fmt.Errorf("ptx: kernel %s: phase %s's groups of %d, %d to a CTA of %d (at most 15)", k.Name, p.k.Name, p.width, cta/p.width, cta)
		}
		wide = wide || p.width > 32
	}
	dependent := t.Dependent != nil && t.Dependent(k)
	if dependent && t.SM < 90 {
		return "", fmt.Errorf("ptx: kernel %s: dependent launch needs sm_90 (target sm_%d)", k.Name, t.SM)
	}
	f := newFn(k.Name, ps[0].k, t)
	f.cta = cta
	if wide {
		f.red = "red_" + paramName(0, k.Name)
	}
	if t.Trace {
		f.traceStart(len(ps))
	}
	var params, names []string
	first := 0
	for i, p := range ps {
		f.k, f.grid, f.width, f.lane, f.mask = p.k, p.grid, p.width, "", ""
		f.localGroups = k.Local.Groups(i, p.width)
		names = append(names, fmt.Sprintf("%s (%d groups of %d)", p.k.Name, f.localGroups, p.width))
		params = append(params, f.loadParams(p.k.Params, first)...)
		first += len(p.k.Params)
		if i > 0 {
			f.traceEnd(id, i-1)
			f.out.WriteString(fmt.Sprintf("\t// phase %d: %s, after the CTA's groups are done with phase %d\n", i, p.k.Name, i-1))
			f.ins("bar.sync 0")
			f.traceNext()
			f.stmts(p.k.Body)
			continue
		}
		// the first phase waits for the kernel before as a kernel does,
		// its stages' copies before that wait
		f.stageCTA = cta
		f.staging = localStages(t, k, p) > 0
		if err := f.firstPhase(p, dependent); err != nil {
			return "", err
		}
		f.prefetch, f.staging = false, false
	}
	f.traceEnd(id, len(ps)-1)
	f.ins("ret")
	if f.err != nil {
		return "", f.err
	}
	f.bounds = fmt.Sprintf(".maxntid %d, 1, 1\n", cta)
	if n := t.LocalWarps / (cta / 32); n > 1 {
		f.bounds += fmt.Sprintf(".minnctapersm %d\n", n)
	}
	if err := f.checkStages(k, localStages(t, k, ps[0])); err != nil {
		return "", err
	}
	mode := fmt.Sprintf("%d CTA-local phases, each a loop spread over the grid (each CTA its share of consecutive groups), a CTA barrier between: %s; CTAs of exactly %d",
		len(ps), strings.Join(names, ", "), cta)
	return f.text(k.Doc, mode, params, 0, 8*cta/32), nil
}

// localStages is the shared memory the stages of local phased kernel k's
// first phase p take a CTA (Launch.Stages).
func localStages(t Target, k *kernel.Kernel, p phase) int {
	return firstPhaseStages(t, k, p, k.Local.CTA)
}

// firstPhaseStages is the shared memory the stages of kernel k's first
// phase p take a CTA of cta threads: its groups' slots, where a dependent
// launch's wait hides their copies.
func firstPhaseStages(t Target, k *kernel.Kernel, p phase, cta int) int {
	dependent := t.Dependent != nil && t.Dependent(k)
	if !dependent || !canStage(t, p.k.Body, p.grid, p.width, cta) {
		return 0
	}
	return stageRegion(p.grid.Body) * stageSlots(p.width, cta)
}
