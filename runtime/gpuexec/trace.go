package gpuexec

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// A traced step (JITLLM_TRACE=1: ptx.Target.Trace) leaves a record a CTA
// of when it started, when its wait for the kernel before returned and
// when it was done. traceSpans turns them back into launches: the step's
// launches in order, each with its CTAs' times, which say where a decode
// step's time goes between the kernels (docs/gpu.md).

// traceLaunch is one launch of a step as planned (or one phase of a
// phased launch): its module entry, the phase and its CTAs.
type traceLaunch struct {
	name         string
	entry, phase int
	ctas         int
}

// key is the launch's records' entry and phase.
type traceKey struct{ entry, phase int }

// traceSpan is one launch's CTAs on the device clock (ns).
type traceSpan struct {
	traceLaunch
	firstStart, lastStart uint64
	firstWait, lastWait   uint64
	doneP90, lastDone     uint64
}

// traceSpans assigns records to launches: the records of an entry, by
// their start, go to its launches in step order (a launch's CTAs all start
// before the next launch of the same entry can: dependent launches start
// only once every CTA of the kernel before has passed its wait).
func traceSpans(recs []ptx.TraceRecord, launches []traceLaunch) ([]traceSpan, error) {
	by := map[traceKey][]ptx.TraceRecord{}
	for _, r := range recs {
		k := traceKey{r.Entry, r.Phase}
		by[k] = append(by[k], r)
	}
	for _, rs := range by {
		slices.SortStableFunc(rs, func(a, b ptx.TraceRecord) int { return cmp.Compare(a.Start, b.Start) })
	}
	taken := map[traceKey]int{}
	spans := make([]traceSpan, len(launches))
	for i, l := range launches {
		key := traceKey{l.entry, l.phase}
		rs := by[key]
		at := taken[key]
		if at+l.ctas > len(rs) {
			return nil, fmt.Errorf("trace: launch %d (%s) of %d CTAs: only %d records of its entry left", i, l.name, l.ctas, len(rs)-at)
		}
		mine := rs[at : at+l.ctas]
		taken[key] = at + l.ctas
		s := traceSpan{traceLaunch: l, firstStart: ^uint64(0), firstWait: ^uint64(0)}
		done := make([]uint64, 0, len(mine))
		for _, r := range mine {
			s.firstStart, s.lastStart = min(s.firstStart, r.Start), max(s.lastStart, r.Start)
			s.firstWait, s.lastWait = min(s.firstWait, r.Wait), max(s.lastWait, r.Wait)
			s.lastDone = max(s.lastDone, r.Done)
			done = append(done, r.Done)
		}
		slices.Sort(done)
		s.doneP90 = done[len(done)*9/10]
		spans[i] = s
	}
	for e, rs := range by {
		if taken[e] != len(rs) {
			return nil, fmt.Errorf("trace: entry %d phase %d has %d records, its launches %d CTAs", e.entry, e.phase, len(rs), taken[e])
		}
	}
	return spans, nil
}

// traceReport is the step's timeline in µs: every launch's start, its
// first CTA's return from the wait (the gap after the launch before was
// done), its last CTA's end and the tail after nine in ten were done; then
// the same summed by kernel.
func traceReport(spans []traceSpan) string {
	if len(spans) == 0 {
		return "no launches"
	}
	t0 := spans[0].firstStart
	us := func(ns uint64) float64 { return float64(int64(ns-t0)) / 1e3 }
	d := func(a, b uint64) float64 { return float64(int64(a-b)) / 1e3 }
	var b strings.Builder
	type sum struct {
		n                     int
		gap, busy, tail, ramp float64
	}
	sums := map[string]*sum{}
	var names []string
	fmt.Fprintf(&b, "%4s %-40s %6s %9s %8s %8s %8s %8s %8s\n", "#", "kernel", "CTAs", "start", "ramp", "gap", "busy", "tail", "end")
	var prevDone uint64
	for i, s := range spans {
		gap := 0.0
		if i > 0 {
			gap = d(s.firstWait, prevDone)
		}
		busy, tail, ramp := d(s.lastDone, s.firstWait), d(s.lastDone, s.doneP90), d(s.lastStart, s.firstStart)
		fmt.Fprintf(&b, "%4d %-40s %6d %9.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", i, s.name, s.ctas, us(s.firstStart), ramp, gap, busy, tail, us(s.lastDone))
		sm := sums[s.name]
		if sm == nil {
			sm = &sum{}
			sums[s.name] = sm
			names = append(names, s.name)
		}
		sm.n++
		sm.gap += gap
		sm.busy += busy
		sm.tail += tail
		sm.ramp += ramp
		prevDone = max(prevDone, s.lastDone)
	}
	total := d(prevDone, t0)
	fmt.Fprintf(&b, "the step: %.1f µs from the first CTA's start to the last's end\n", total)
	slices.SortFunc(names, func(a, c string) int { return cmp.Compare(sums[c].gap+sums[c].busy, sums[a].gap+sums[a].busy) })
	fmt.Fprintf(&b, "%-40s %5s %9s %9s %9s %9s %7s\n", "kernel", "n", "gap µs", "busy µs", "tail µs", "ramp µs", "share")
	for _, n := range names {
		sm := sums[n]
		fmt.Fprintf(&b, "%-40s %5d %9.1f %9.1f %9.1f %9.1f %6.1f%%\n", n, sm.n, sm.gap, sm.busy, sm.tail, sm.ramp, 100*(sm.gap+sm.busy)/total)
	}
	return b.String()
}

// traceStep replays the one-row step's graph g once with the trace
// counter cleared and returns its spans (the runner's module rendered
// with ptx.Target.Trace).
func (r *Runner) traceStep(g *cuda.Graph) ([]traceSpan, error) {
	if !r.sh.tg.Trace {
		return nil, fmt.Errorf("trace: the module is not traced (JITLLM_TRACE=1)")
	}
	count, err := r.sh.mod.Global(ptx.TraceCountSymbol)
	if err != nil {
		return nil, err
	}
	words, err := r.sh.mod.Global(ptx.TraceSymbol)
	if err != nil {
		return nil, err
	}
	if err := r.s.Synchronize(); err != nil {
		return nil, err
	}
	if err := count.Zero(); err != nil {
		return nil, err
	}
	if err := g.Launch(r.s); err != nil {
		return nil, err
	}
	if err := r.s.Synchronize(); err != nil {
		return nil, err
	}
	var nb [4]byte
	if err := count.Download(nb[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(nb[:]))
	if n > ptx.TraceRecords {
		return nil, fmt.Errorf("trace: %d CTAs, more than the %d recorded", n, ptx.TraceRecords)
	}
	raw := make([]byte, 32*n)
	if err := words.Slice(0, uint64(len(raw))).Download(raw); err != nil {
		return nil, err
	}
	w := make([]uint64, 4*n)
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(raw[8*i:])
	}
	index := map[string]int{}
	for i, k := range r.sh.ks {
		index[k.Name] = i
	}
	var ls []traceLaunch
	for _, c := range r.calls {
		if c.side {
			continue // a side stream's launches are not the step's chain
		}
		e, ok := index[c.fn.Name]
		if !ok {
			return nil, fmt.Errorf("trace: launch of %s: not in the module", c.fn.Name)
		}
		ctas := int(c.grid.X * c.grid.Y * c.grid.Z)
		if ps := r.sh.ks[e].Phases; len(ps) > 0 && r.sh.ks[e].Epilogue == nil { // a block epilogue records once
			for p, k := range ps {
				ls = append(ls, traceLaunch{name: fmt.Sprintf("%s[%d] %s", c.fn.Name, p, k.Name), entry: e, phase: p, ctas: ctas})
			}
			continue
		}
		ls = append(ls, traceLaunch{name: c.fn.Name, entry: e, ctas: ctas})
	}
	recs := ptx.DecodeTrace(w)
	// a side stream's records (warm.go) have no span: drop their entries
	keep := map[int]bool{}
	for _, l := range ls {
		keep[l.entry] = true
	}
	recs = slices.DeleteFunc(recs, func(r ptx.TraceRecord) bool { return !keep[r.Entry] })
	return traceSpans(recs, ls)
}
