package ptx_test

import (
	"fmt"
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// A traced module declares its records once; each entry reads the clock at
// entry, after its wait for the kernel before and, after a CTA-wide
// barrier, at its exit, where the CTA's first thread stores its record
// tagged with the entry's index. Untraced, none of it is rendered.
func TestTraceRenders(t *testing.T) {
	all := func(*k.Kernel) bool { return true }
	a, b := pfKernel(true), pfKernel(false)
	b.Name = "pf2"
	src, err := ptx.Module([]*k.Kernel{a, b}, ptx.Target{SM: 90, Dependent: all, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(src, ".global .align 16 .u64 "+ptx.TraceSymbol+"["); n != 1 {
		t.Errorf("records declared %d times", n)
	}
	entries := strings.Split(src, ".visible .entry")[1:]
	if len(entries) != 2 {
		t.Fatalf("%d entries", len(entries))
	}
	for id, e := range entries {
		clock := strings.Count(e, "%globaltimer")
		wait, bar, ret := strings.Index(e, "griddepcontrol.wait"), strings.LastIndex(e, "bar.sync 0"), strings.LastIndex(e, "ret;")
		if clock != 3 || !strings.Contains(e, "atom.global.add.u32") || bar < wait || ret < bar {
			t.Errorf("entry %d: %d clock reads, wait at %d, barrier at %d, ret at %d", id, clock, wait, bar, ret)
		}
		if tag := fmt.Sprintf(", %d;", uint64(id)<<48); id > 0 && !strings.Contains(e, tag) {
			t.Errorf("entry %d: no tag %q", id, tag)
		}
		after := e[strings.Index(e, "griddepcontrol.wait"):]
		if !strings.Contains(after[:strings.Index(after, "\n\t")+40], "%globaltimer") {
			t.Errorf("entry %d: the clock is not read right after the wait", id)
		}
	}
	plain, err := ptx.Module([]*k.Kernel{a, b}, ptx.Target{SM: 90, Dependent: all})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "globaltimer") || strings.Contains(plain, ptx.TraceSymbol) {
		t.Error("untraced: rendered the trace")
	}
}

// A traced phased entry takes a record a phase: its CTAs count two slots
// in at entry and store phase 1's record, tagged, after the grid barrier.
func TestTracePhasedRenders(t *testing.T) {
	a, b := pfKernel(false), pfKernel(false)
	ph, err := k.Phases("ph", a, b)
	if err != nil {
		t.Fatal(err)
	}
	src, err := ptx.Module([]*k.Kernel{pfKernel(false), ph}, ptx.Target{SM: 90, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	e := src[strings.Index(src, ".visible .entry ph"):]
	if !strings.Contains(e, "atom.global.add.u32") || !strings.Contains(e, "], 2;") {
		t.Errorf("the phased entry does not take two slots:\n%s", e)
	}
	if tag := fmt.Sprintf(", %d;", uint64(1)<<48|uint64(1)<<40); !strings.Contains(e, tag) {
		t.Errorf("no record tagged entry 1 phase 1 (%q)", tag)
	}
	if got := ptx.DecodeTrace([]uint64{1<<48 | 1<<40 | 7<<32 | 5, 1, 2, 3})[0]; got.Entry != 1 || got.Phase != 1 || got.SM != 7 || got.CTA != 5 {
		t.Errorf("DecodeTrace: %+v", got)
	}
}
