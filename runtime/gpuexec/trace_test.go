package gpuexec

import (
	"strings"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// The records of a traced step go back to their launches by entry and
// start time, whatever order the device wrote them in.
func TestTraceSpans(t *testing.T) {
	ls := []traceLaunch{{"A", 0, 0, 2}, {"B", 1, 0, 1}, {"A", 0, 0, 2}}
	recs := []ptx.TraceRecord{
		{Entry: 0, Start: 300, Wait: 310, Done: 400}, // A's second launch
		{Entry: 0, Start: 10, Wait: 20, Done: 90},
		{Entry: 1, Start: 80, Wait: 100, Done: 250},
		{Entry: 0, Start: 12, Wait: 30, Done: 95},
		{Entry: 0, Start: 305, Wait: 320, Done: 420},
	}
	spans, err := traceSpans(recs, ls)
	if err != nil {
		t.Fatal(err)
	}
	want := []traceSpan{
		{traceLaunch: ls[0], firstStart: 10, lastStart: 12, firstWait: 20, lastWait: 30, doneP90: 95, lastDone: 95},
		{traceLaunch: ls[1], firstStart: 80, lastStart: 80, firstWait: 100, lastWait: 100, doneP90: 250, lastDone: 250},
		{traceLaunch: ls[2], firstStart: 300, lastStart: 305, firstWait: 310, lastWait: 320, doneP90: 420, lastDone: 420},
	}
	for i := range want {
		if spans[i] != want[i] {
			t.Errorf("launch %d: %+v, want %+v", i, spans[i], want[i])
		}
	}
	rep := traceReport(spans)
	// B's gap: its first wait (100) after A's end (95); A's second: 310 after 250
	for _, s := range []string{"0.01     0.15", "the step: 0.4 µs"} {
		if !strings.Contains(rep, s) {
			t.Errorf("report lacks %q:\n%s", s, rep)
		}
	}
	if _, err := traceSpans(recs[:4], ls); err == nil {
		t.Error("a missing record: no error")
	}
	if _, err := traceSpans(append(recs, ptx.TraceRecord{Entry: 1}), ls); err == nil {
		t.Error("a record too many: no error")
	}
}

// DecodeTrace reads the words as the traced entry stores them.
func TestDecodeTrace(t *testing.T) {
	w := []uint64{3<<48 | 131<<32 | 4095, 1000, 2000, 3000}
	got := ptx.DecodeTrace(w)
	want := ptx.TraceRecord{Entry: 3, SM: 131, CTA: 4095, Start: 1000, Wait: 2000, Done: 3000}
	if len(got) != 1 || got[0] != want {
		t.Errorf("DecodeTrace: %+v, want %+v", got, want)
	}
}
