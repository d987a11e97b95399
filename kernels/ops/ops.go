package ops

import (
	"github.com/jitllm/jitllm/dsl"
	k "github.com/jitllm/jitllm/dsl/kernel"
)

// Groups is every kernel, by the file stem a renderer writes it under.
func Groups() map[string][]*k.Kernel {
	var dq, mv []*k.Kernel
	for _, d := range Blocks() {
		dq = append(dq, Dequant(d))
		mv = append(mv, MatVec(d))
	}
	var dot []*k.Kernel
	for _, d := range Dots() {
		dot = append(dot, d.Kernel)
	}
	attn := []*k.Kernel{RopeSeq(dsl.RopeNormal), RopeSeq(dsl.RopeNeox), KVStoreSeq(), AttentionSeq(),
		KVStoreSeqQ8_0(), AttentionSeqQ8_0()}
	return map[string][]*k.Kernel{
		"dot":       dot,
		"dequant":   dq,
		"matvec":    mv,
		"norm":      {RMSNorm(true), RMSNorm(false), Softmax()},
		"rope":      {Rope(dsl.RopeNormal), Rope(dsl.RopeNeox)},
		"attention": attn,
	}
}
