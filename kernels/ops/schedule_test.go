package ops_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
)

// bits is every value of every buffer argument, as bits.
func bits(args []any) []uint64 {
	var out []uint64
	for _, a := range args {
		switch x := a.(type) {
		case []float32:
			for _, v := range x {
				out = append(out, uint64(math.Float32bits(v)))
			}
		case []byte:
			for _, v := range x {
				out = append(out, uint64(v))
			}
		}
	}
	return out
}

// A schedule never changes results: every kernel, with every loop split
// and unrolled in odd factors, gives the unscheduled kernel's bits.
func TestScheduleKeepsResults(t *testing.T) {
	scheds := []kernel.LoopSchedule{{Unroll: 3}, {Split: 5}, {Split: 8, Unroll: 3}, {Split: 2, Unroll: 2}}
	for group, ks := range ops.Groups() {
		for _, k := range ks {
			want := opstest.Args(k.Name, 1)
			if want == nil {
				t.Fatalf("%s/%s: no test arguments", group, k.Name)
			}
			run(t, k, want...)
			for _, ls := range scheds {
				s := kernel.Schedule{}
				for _, l := range kernel.Loops(k) {
					s[l] = ls
				}
				sk, err := kernel.Apply(k, s)
				if err != nil {
					t.Fatal(err)
				}
				got := opstest.Args(k.Name, 1)
				run(t, sk, got...)
				if fmt.Sprint(bits(got)) != fmt.Sprint(bits(want)) {
					t.Fatalf("%s under %+v: results differ", k.Name, ls)
				}
			}
		}
	}
}
