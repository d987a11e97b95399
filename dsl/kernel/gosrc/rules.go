// Package gosrc renders kernels as plain Go functions: bounds-check
// friendly (fixed-size windows become array pointers), allocation-free, and
// bit-identical to the interpreter (every float op is wrapped in an explicit
// conversion, which Go's spec says forbids fusing it into an FMA).
package gosrc

import "github.com/jitllm/jitllm/dsl/kernel"

// Caps of the Go target, which the rules below follow:
//   - no vector types: a Lanes hint becomes that many unrolled copies;
//   - no threads inside a kernel: ParallelFor runs serially, and callers
//     split the parallel (row) loop by slicing its buffers;
//   - no work-groups: a barrier is nothing.

// schedule is the kernel's schedule, overridden by o, in the form the Go
// target can run.
func schedule(k *kernel.Kernel, o kernel.Schedule) kernel.Schedule {
	s := k.Schedule.With(o)
	for name, ls := range s {
		if ls.Lanes > 1 && ls.Unroll == 0 {
			ls.Unroll = ls.Lanes
		}
		ls.Lanes = 0
		s[name] = ls
	}
	return s
}
