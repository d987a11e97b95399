package gpuexec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// TestGPUAttentionBlock checks the tensor-core prefill attention on the
// device against the float64 reference (the bound of the interpreter's
// test, kernels/ops) on the three models' head shapes, steps of 512 rows
// at positions 0 and 1536 and one of 37 rows at position 300, and logs its
// time beside AttentionSplit + AttentionMerge's on the same step.
func TestGPUAttentionBlock(t *testing.T) {
	c, s := tensorCoreStream(t)
	split, merge := ops.AttentionSplit(), ops.AttentionMerge()
	blocks := map[int]*kernel.Kernel{64: ops.AttentionBlock(64), 128: ops.AttentionBlock(128)}
	ones := map[int]*kernel.Kernel{64: ops.AttentionBlockWarps(64, 1), 128: ops.AttentionBlockWarps(128, 1)}
	mod, tg := loadKernels(t, c, split, merge, blocks[64], blocks[128], ones[64], ones[128])
	r := rand.New(rand.NewPCG(13, 14))
	for _, sh := range []struct {
		name                          string
		hd, heads, kvHeads, rows, pos int
	}{
		{"llama-3.2-1b", 64, 32, 8, 512, 0}, {"qwen3-0.6b", 128, 16, 8, 512, 0},
		{"llama-3.2-1b", 64, 32, 8, 37, 300}, {"qwen3-0.6b", 128, 16, 8, 37, 300},
		{"llama-3.1-8b", 128, 32, 8, 512, 0}, {"qwen3-0.6b", 128, 16, 8, 512, 1536},
		// decode steps, where a CTA of one warp takes the row
		{"qwen3-0.6b", 128, 16, 8, 1, 5}, {"qwen3-0.6b", 128, 16, 8, 1, 64}, {"qwen3-0.6b", 128, 16, 8, 1, 127},
		{"qwen3-0.6b", 128, 16, 8, 1, 511}, {"qwen3-0.6b", 128, 16, 8, 1, 2047},
		{"llama-3.2-1b", 64, 32, 8, 1, 64}, {"llama-3.2-1b", 64, 32, 8, 1, 511},
	} {
		ctx := sh.pos + sh.rows + kernel.AttnBlock
		dim, group := sh.kvHeads*sh.hd, sh.heads/sh.kvHeads
		kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
		for i := range kc {
			kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
			vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		q := opstest.Floats(sh.rows*sh.heads*sh.hd, 1, r)
		scale := float32(1 / math.Sqrt(float64(sh.hd)))
		ns, np := sh.heads*sh.rows*ctx, sh.rows*sh.heads*ops.AttnSplitChunks*(sh.hd+2)
		qd, kd, vd := upload(t, c, f32Bytes(q)), upload(t, c, u16Bytes(kc)), upload(t, c, u16Bytes(vc))
		stepd := upload(t, c, []byte{0, 0, 0, 0, byte(sh.pos), byte(sh.pos >> 8), 0, 0})
		yd := zeroed(t, c, 4*len(q))
		sd, pd := zeroed(t, c, 4*ns), zeroed(t, c, 4*np)
		ba := cuda.NewArgs(14)
		for i, b := range []struct {
			p cuda.Buffer
			n int
		}{{qd, len(q)}, {kd, len(kc)}, {vd, len(vc)}, {stepd, 2}, {yd, len(q)}} {
			ba.Set(2*i, b.p.Ptr)
			ba.Set(2*i+1, uint64(b.n))
		}
		ba.Set(10, uint64(sh.heads))
		ba.Set(11, uint64(group))
		ba.Set(12, uint64(dim))
		ba.Set(13, uint64(math.Float32bits(scale)))
		bk := blocks[sh.hd]
		if sh.rows == 1 {
			bk = ones[sh.hd]
		}
		runBlock := launcher(t, mod, tg, s, bk, ba, ptx.Elems(len(q)), ptx.Elems(len(kc)), ptx.Elems(len(vc)), ptx.Elems(2), ptx.Elems(len(q)), sh.heads, group, dim, scale)
		if err := yd.Upload(f32Bytes(nans(len(q)))); err != nil {
			t.Fatal(err)
		}
		runBlock()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		bworst := attnError(t, yd, q, kc, vc, sh.pos, sh.hd, sh.heads, group, dim, scale)
		if bworst > 1e-3 || math.IsNaN(bworst) {
			t.Errorf("%s, %d rows at position %d: AttentionBlock differs from the reference by %.3g", sh.name, sh.rows, sh.pos, bworst)
		}
		runSplit, runMerge := attnSplitMerge(t, mod, tg, s, split, merge,
			attnBufs{q: qd, kc: kd, vc: vd, part: pd, step: stepd, sc: sd, y: yd, nq: len(q), nkc: len(kc), nvc: len(vc), np: np, ns: ns},
			sh.hd, sh.heads, group, dim, ctx, ops.AttnSplitChunks, scale)
		bu := deviceMicros(t, c, s, 10, runBlock)
		su := deviceMicros(t, c, s, 5, func() { runSplit(); runMerge() })
		t.Logf("%s heads, %d rows at position %d: %s %.1f µs (within %.2g of the reference), AttentionSplit+Merge %.1f µs", sh.name, sh.rows, sh.pos, bk.Name, bu, bworst, su)
		for _, b := range []cuda.Buffer{qd, kd, vd, stepd, yd, sd, pd} {
			b.Free()
		}
	}
}
