package main

import (
	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/capabilities"
	"github.com/jitllm/jitllm/runtime/exec"
)

// cpuDescriptor describes runtime/exec, the CPU backend, while it does not
// register a descriptor itself. Every field is read from the backend's code:
// the quant kernels' own coverage predicates and a real plan by exec.NewRunner.
// Once runtime/exec calls capabilities.RegisterBackend, this is no longer used.
func cpuDescriptor() capabilities.Descriptor {
	return capabilities.Descriptor{
		Name:    "cpu",
		Device:  "cpu",
		Package: "github.com/jitllm/jitllm/runtime/exec",
		Decode:  quant.CanDequantize,
		MatMul:  quant.CanVecDot,
		Plan:    planCPU,
	}
}

// planCPU binds g's weights to zero F32 bytes and plans it with exec: every
// node must lower to a CPU kernel.
func planCPU(g *dsl.G) error {
	m := exec.ZeroModel(g)
	r, err := exec.NewRunner(m, exec.Options{Threads: 1, MaxBatch: 2, Context: 8})
	if err != nil {
		return err
	}
	r.Close()
	return nil
}
