package gpuexec

import (
	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/capabilities"
	"github.com/jitllm/jitllm/runtime/exec"
)

// The CUDA backend declares what it covers, read from its own code: a type
// is covered when kernels/ops describes its block (or it is F32, F16 or
// BF16), and a family when its traced graph lowers to a plan here.
func init() {
	capabilities.RegisterBackend(capabilities.Descriptor{
		Name:    "cuda",
		Device:  "cuda",
		Package: "github.com/jitllm/jitllm/runtime/gpuexec",
		Decode:  covers,
		MatMul:  covers,
		Plan:    planTraced,
		// The host side is portable Go; device code is PTX rendered at run
		// time for the card found (sm_70 and newer).
		Variants: []capabilities.Variant{
			{GOARCH: "amd64", Kind: "ptx", Features: []string{"sm_70+"}},
			{GOARCH: "arm64", Kind: "ptx", Features: []string{"sm_70+"}},
		},
	})
}

func covers(t quant.Type) bool {
	if t == quant.F32 || t == quant.F16 || t == quant.BF16 {
		return true
	}
	_, ok := blockOf(t)
	return ok
}

// planTraced plans a traced graph with zero F32 weights, as NewRunner would.
func planTraced(g *dsl.G) error {
	_, err := newPlan(exec.ZeroModel(g), 8, 2)
	return err
}
