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
	shared, own, err := EstimateShared(m, context)
	return shared + own, err
}

// EstimateShared is EstimateBytes in two parts: what the runners that
// share one plan (Runner.Share) hold once, the constant allocations
// (weights, vectors, RoPE tables) and DeviceOverhead, and what each holds
// of its own (KV caches, activations, scratch). The resident f16 copies of
// the prefill weights are left out: bind sizes them from the memory free.
func EstimateShared(m *exec.Model, context int) (shared, own int64, err error) {
	if context <= 0 {
		context = m.ContextLength()
		if context <= 0 || context > 4096 {
			context = 4096
		}
	}
	p, err := newPlan(m, context, prefillRows(context))
	if err != nil {
		return 0, 0, err
	}
	shared = DeviceOverhead
	for _, a := range p.allocs {
		if a.constant() {
			shared += allocSize(a)
		} else {
			own += allocSize(a)
		}
	}
	return shared, own, nil
}

// allocSize is what NewRunner asks cuMemAlloc for one allocation.
func allocSize(a alloc) int64 { return int64(max(a.n*a.kind.Bytes(), 4)) }
