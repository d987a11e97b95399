package exec

// The native kernels register themselves into kernels/cpukern at init, for
// the instruction sets this CPU has; the matmul looks them up by order and
// falls back to kernels/cpugen where none is registered, the attention its
// two inner loops (else its Go ones). The packages build on every GOARCH
// (kernels/amd64/... registering nothing off amd64, kernels/arm64/...
// nothing off arm64).
import (
	_ "github.com/jitllm/jitllm/kernels/amd64/attn"
	_ "github.com/jitllm/jitllm/kernels/amd64/elem"
	_ "github.com/jitllm/jitllm/kernels/amd64/kquant"
	_ "github.com/jitllm/jitllm/kernels/amd64/legacy"
	_ "github.com/jitllm/jitllm/kernels/arm64/neon"
)
