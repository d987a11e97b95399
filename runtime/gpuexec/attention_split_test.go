package gpuexec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/ops/opstest"
	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/cuda"
)

// TestGPUAttentionSplitDecode checks the decode attention (AttentionSplit +
// AttentionMerge) on the device against the float64 reference, one row of
// the 1B's and qwen3-0.6b's heads at positions 0 to 2047, and logs the
// pair's time by position, launched back to back (about 8 µs of the small
// ones is the two launches). Stop 17 on the H200: specialized to the heads
// with the query pre-rounded, the pair went from 22.1 to 17.0 µs at
// position 64 and 60.8 to 47.1 at 2047 (1B heads), 31.7 to 22.3 and 88.4
// to 63.0 (qwen3's); the dot's loads 8, 32 or all at a time within 5%. A
// form with the head dimensions over the lanes (AttentionSplitDims, stop
// 16) was faster to position 64 and slower past 128.
func TestGPUAttentionSplitDecode(t *testing.T) {
	needGPU(t)
	c, s := deviceStream(t)
	r := rand.New(rand.NewPCG(15, 16))
	for _, sh := range []struct {
		name              string
		hd, heads, kvHead int
	}{{"llama-3.2-1b", 64, 32, 8}, {"qwen3-0.6b", 128, 16, 8}} {
		const ctx = 2048
		dim, group := sh.kvHead*sh.hd, sh.heads/sh.kvHead
		scale := float32(1 / math.Sqrt(float64(sh.hd)))
		// as built (every shape a scalar), and specialized to the heads
		// for a query RopeKVStore rounded, as the runner plans it, with the
		// q·k dot's loads in flight 8, 32 (the plan's) and all at a time
		spec := func(mk func() *kernel.Kernel, vals map[string]any) *kernel.Kernel {
			k, err := kernel.Specialize(mk(), vals)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
		split, gMerge := ops.AttentionSplit(), ops.AttentionMerge()
		sMerge := spec(ops.AttentionMerge, map[string]any{"headDim": sh.hd, "heads": sh.heads, "chunks": ops.AttnSplitChunks})
		splits := []*kernel.Kernel{split}
		for _, u := range []int{8, 32, sh.hd} {
			k := spec(ops.AttentionSplitRounded, map[string]any{"headDim": sh.hd, "heads": sh.heads, "group": group, "kvDim": dim, "ctx": ctx,
				"chunks": ops.AttnSplitChunks, "scale": scale})
			k.Schedule = k.Schedule.With(kernel.Schedule{"dot_i": {Unroll: u}})
			k.Name += fmt.Sprintf("_dot%d", u)
			splits = append(splits, k)
		}
		mod, tg := loadKernels(t, c, append(splits, gMerge, sMerge)...)
		kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
		for i := range kc {
			kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
			vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		q := opstest.Floats(sh.heads*sh.hd, 1, r)
		qr := make([]float32, len(q)) // as RopeKVStore leaves it
		for i, v := range q {
			qr[i] = quant.F16ToF32(quant.F32ToF16(v))
		}
		ns, np := sh.heads*ctx, ops.AttnPartLen(sh.heads, ops.AttnSplitChunks, sh.hd)
		qd, qrd, kd, vd := upload(t, c, f32Bytes(q)), upload(t, c, f32Bytes(qr)), upload(t, c, u16Bytes(kc)), upload(t, c, u16Bytes(vc))
		defer qrd.Free()
		sd, pd, yd := zeroed(t, c, 4*ns), zeroed(t, c, 4*np), zeroed(t, c, 4*len(q))
		for _, pos := range []int{0, 5, 64, 128, 511, 2047} {
			for vi, split := range splits {
				merge, qb := sMerge, qrd
				if vi == 0 {
					merge, qb = gMerge, qd
				}
				stepd := upload(t, c, []byte{0, 0, 0, 0, byte(pos), byte(pos >> 8), 0, 0})
				runSplit, runMerge := attnSplitMerge(t, mod, tg, s, split, merge,
					attnBufs{q: qb, kc: kd, vc: vd, part: pd, step: stepd, sc: sd, y: yd, nq: len(q), nkc: len(kc), nvc: len(vc), np: np, ns: ns},
					sh.hd, sh.heads, group, dim, ctx, ops.AttnSplitChunks, scale)
				runSplit()
				runMerge()
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				if worst := attnError(t, yd, q, kc, vc, pos, sh.hd, sh.heads, group, dim, scale); worst > 1e-4 {
					t.Errorf("%s %s at position %d: the device differs from the reference by %.3g", sh.name, split.Name, pos, worst)
				}
				us := deviceMicros(t, c, s, 20, func() { runSplit(); runMerge() })
				t.Logf("%s heads, one row at position %d: %s+Merge %.1f µs", sh.name, pos, split.Name, us)
				stepd.Free()
			}
		}
		for _, b := range []cuda.Buffer{qd, kd, vd, sd, pd, yd} {
			b.Free()
		}
	}
}
