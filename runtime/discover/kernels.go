package discover

import (
	"github.com/jitllm/jitllm/dsl"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/weights"
)

// cpuKernels lists the kernels the CPU backend would run for g's matmuls on
// this CPU, one entry per distinct (type, row class, order, ISA) with the
// number of weights that use it.
func cpuKernels(g *dsl.G, src weights.Source) []exec.KernelUse {
	seen := map[exec.KernelUse]int{}
	var out []exec.KernelUse
	for _, n := range g.Nodes {
		if n.Op != dsl.OpMatMul || n.Weight < 0 {
			continue
		}
		w := g.Weights[n.Weight]
		t, ok := src.Tensor(w.GGUF)
		if !ok || !quant.CanVecDot(t.Type) || len(w.Dims) == 0 {
			continue
		}
		one, many := exec.MatMulKernels(t.Type, int(w.Dims[0]), n.Cols)
		for _, k := range []exec.KernelUse{one, many} {
			if i, ok := seen[k]; ok {
				out[i].Tensors++
				continue
			}
			seen[k] = len(out)
			k.Tensors = 1
			out = append(out, k)
		}
	}
	return out
}
