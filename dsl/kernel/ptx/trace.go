package ptx

import "fmt"

// Tracing (Target.Trace): every CTA of every entry but a phased one
// records when it started, when its wait for the kernel before returned
// and when its last thread was done, on the device's global nanosecond
// clock (%globaltimer), so a decode step's timeline can be read back
// after one replay: where each launch's CTAs start against the one
// before, how long they wait, how long the tail of the last ones is.
// A diagnostic: the records cost a few instructions and an atomic a CTA.

// TraceRecords is the most CTAs a traced module records; later ones are
// counted but not stored.
const TraceRecords = 1 << 19

// The module-scope names of the records and of their count.
const (
	TraceSymbol      = "jitllm_trace"
	TraceCountSymbol = "jitllm_trace_n"
)

// TraceRecord is one CTA's record: its entry's index in the module, the
// phase (of a phased entry: a record a phase, from the barrier before it,
// or the entry, to the CTA's arrival at the barrier after), the
// multiprocessor and CTA, and the three times in ns.
type TraceRecord struct {
	Entry, Phase, SM, CTA int
	Start, Wait, Done     uint64
}

// DecodeTrace reads n records of 4 words each (as the device wrote them).
func DecodeTrace(words []uint64) []TraceRecord {
	out := make([]TraceRecord, 0, len(words)/4)
	for i := 0; i+4 <= len(words); i += 4 {
		w := words[i]
		out = append(out, TraceRecord{Entry: int(w >> 48), Phase: int(w >> 40 & 0xff), SM: int(w >> 32 & 0xff), CTA: int(w & 0xffffffff),
			Start: words[i+1], Wait: words[i+2], Done: words[i+3]})
	}
	return out
}

// traceGlobals declares the records and their count at module scope.
func traceGlobals() string {
	return fmt.Sprintf("\n// trace (Target.Trace): 4 words a CTA\n.visible .global .align 16 .u64 %s[%d];\n.visible .global .align 4 .u32 %s;\n",
		TraceSymbol, 4*TraceRecords, TraceCountSymbol)
}

// traceStart reads the clock at entry and takes the CTA's n record slots
// (thread 0's; its result is used only at the exit, so the atomic's
// round trip overlaps the kernel).
func (f *fn) traceStart(n int) {
	f.trace = &traceRegs{t0: f.reg(c64), t1: f.reg(c64), idx: f.reg(c32), first: f.reg(cPred)}
	tr := f.trace
	f.ins("mov.u64 %s, %%globaltimer", tr.t0)
	f.ins("mov.u64 %s, %s", tr.t1, tr.t0)
	tid := f.reg(c32)
	f.ins("mov.u32 %s, %%tid.x", tid)
	f.ins("setp.eq.u32 %s, %s, 0", tr.first, tid)
	f.ins("@%s atom.global.add.u32 %s, [%s], %d", tr.first, tr.idx, TraceCountSymbol, n)
}

// traceWait reads the clock after the wait for the kernel before.
func (f *fn) traceWait() {
	if f.trace != nil {
		f.ins("mov.u64 %s, %%globaltimer", f.trace.t1)
	}
}

// traceEnd stores record k (phase k) once every thread of the CTA is
// done with it.
func (f *fn) traceEnd(id, k int) {
	tr := f.trace
	if tr == nil {
		return
	}
	skip := f.label()
	f.ins("bar.sync 0")
	in, at := f.reg(cPred), f.reg(c32)
	f.ins("add.u32 %s, %s, %d", at, tr.idx, k)
	f.ins("setp.lt.and.u32 %s, %s, %d, %s", in, at, TraceRecords, tr.first)
	f.ins("@!%s bra %s", in, skip)
	t2, sm, cta := f.reg(c64), f.reg(c32), f.reg(c32)
	f.ins("mov.u64 %s, %%globaltimer", t2)
	f.ins("mov.u32 %s, %%smid", sm)
	f.ins("mov.u32 %s, %%ctaid.x", cta)
	w, s, a, base := f.reg(c64), f.reg(c64), f.reg(c64), f.reg(c64)
	f.ins("cvt.u64.u32 %s, %s", w, cta)
	f.ins("cvt.u64.u32 %s, %s", s, sm)
	f.ins("shl.b64 %s, %s, 32", s, s)
	f.ins("or.b64 %s, %s, %s", w, w, s)
	f.ins("or.b64 %s, %s, %d", w, w, uint64(id)<<48|uint64(k)<<40)
	f.ins("mul.wide.u32 %s, %s, 32", a, at)
	f.ins("mov.u64 %s, %s", base, TraceSymbol)
	f.ins("add.s64 %s, %s, %s", a, a, base)
	f.ins("st.global.v2.u64 [%s], {%s, %s}", a, w, tr.t0)
	f.ins("st.global.v2.u64 [%s+16], {%s, %s}", a, tr.t1, t2)
	f.place(skip)
}

// traceNext starts the next phase's record: its clock from now.
func (f *fn) traceNext() {
	if tr := f.trace; tr != nil {
		f.ins("mov.u64 %s, %%globaltimer", tr.t0)
		f.ins("mov.u64 %s, %s", tr.t1, tr.t0)
	}
}

// traceRegs are a traced entry's registers: the entry and wait times,
// the record's slot and whether this thread is the CTA's first.
type traceRegs struct{ t0, t1, idx, first string }
