package gpuexec

import (
	"github.com/jitllm/jitllm/runtime/exec"
)

// DeviceOverhead is what the driver takes beyond the plan's allocations
// when the module loads and the graph is captured: code, constant banks
// and the local-memory reserve for every resident thread (measured 106 MiB
// for the llama kernels on the H200's 132 SMs; budgeted with margin).
const DeviceOverhead = 128 << 20

// EstimateBytes is the device memory NewRunner will take for m with a KV
// cache of context positions (0: NewRunner's default): the allocations of
// the same plan NewRunner builds, computed without a GPU, plus
// DeviceOverhead.
func EstimateBytes(m *exec.Model, context int) (int64, error) {
	if context <= 0 {
		context = m.ContextLength()
		if context <= 0 || context > 4096 {
			context = 4096
		}
	}
	p, err := newPlan(m, context, prefillRows(context))
	if err != nil {
		return 0, err
	}
	n := int64(DeviceOverhead)
	for _, a := range p.allocs {
		n += allocSize(a)
	}
	return n, nil
}

// allocSize is what NewRunner asks cuMemAlloc for one allocation.
func allocSize(a alloc) int64 { return int64(max(a.n*a.kind.Bytes(), 4)) }
