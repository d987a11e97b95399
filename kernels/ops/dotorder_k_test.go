package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
)

// Q5_K's decode (not yet in Blocks, so not in TestDequantMatchesQuant) is
// quant's dequantize_row_q5_K bit for bit.
func TestQ5_KDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, nb := range []int{1, 3, 8} {
		src := opstest.Blocks(ops.Q5_K, nb, r)
		got, want := make([]float32, nb*256), make([]float32, nb*256)
		run(t, ops.Dequant(ops.Q5_K), src, got)
		if err := quant.Dequantize(quant.Q5_K, src, want); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("nb=%d [%d]: %v, quant %v", nb, i, got[i], want[i])
			}
		}
	}
}
