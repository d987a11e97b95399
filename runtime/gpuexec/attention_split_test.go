package gpuexec

import (
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
// pair's time by position (H200, stop 16: 15 µs at position 0, 23-35 at 64,
// 62-92 at 2047, the 1B's heads and qwen3's: a tenth to a fifth of a decode
// step). A form with the head dimensions over the lanes and pieces of any
// length (AttentionSplitDims, tried then) was faster to position 64 and
// slower past 128; copies of the q·k loop (Unroll 8) changed nothing.
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
		// as built (every shape a scalar) and specialized to the heads, as
		// the runner plans it
		split, merge := ops.AttentionSplit(), ops.AttentionMerge()
		sSplit, err := kernel.Specialize(split, map[string]any{"headDim": sh.hd, "heads": sh.heads, "group": group, "kvDim": dim, "ctx": ctx,
			"chunks": ops.AttnSplitChunks, "scale": scale})
		if err != nil {
			t.Fatal(err)
		}
		sMerge, err := kernel.Specialize(merge, map[string]any{"headDim": sh.hd, "heads": sh.heads, "chunks": ops.AttnSplitChunks})
		if err != nil {
			t.Fatal(err)
		}
		mod, tg := loadKernels(t, c, split, merge, sSplit, sMerge)
		kc, vc := make([]uint16, ctx*dim), make([]uint16, ctx*dim)
		for i := range kc {
			kc[i] = quant.F32ToF16(float32(r.NormFloat64()))
			vc[i] = quant.F32ToF16(float32(r.NormFloat64()))
		}
		q := opstest.Floats(sh.heads*sh.hd, 1, r)
		ns, np := sh.heads*ctx, sh.heads*ops.AttnSplitChunks*(sh.hd+2)
		qd, kd, vd := upload(t, c, f32Bytes(q)), upload(t, c, u16Bytes(kc)), upload(t, c, u16Bytes(vc))
		sd, pd, yd := zeroed(t, c, 4*ns), zeroed(t, c, 4*np), zeroed(t, c, 4*len(q))
		for _, pos := range []int{0, 5, 64, 128, 511, 2047} {
			for _, pair := range [][2]*kernel.Kernel{{split, merge}, {sSplit, sMerge}} {
				split, merge := pair[0], pair[1]
				stepd := upload(t, c, []byte{0, 0, 0, 0, byte(pos), byte(pos >> 8), 0, 0})
				runSplit, runMerge := attnSplitMerge(t, mod, tg, s, split, merge,
					attnBufs{q: qd, kc: kd, vc: vd, part: pd, step: stepd, sc: sd, y: yd, nq: len(q), nkc: len(kc), nvc: len(vc), np: np, ns: ns},
					sh.hd, sh.heads, group, dim, ctx, ops.AttnSplitChunks, scale)
				runSplit()
				runMerge()
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 4*len(q))
				if err := yd.Download(got); err != nil {
					t.Fatal(err)
				}
				want := opstest.AttentionRef(q, kc, vc, pos, sh.hd, sh.heads, group, dim, scale)
				var worst float64
				for i, g := range f32sFrom(got) {
					worst = math.Max(worst, math.Abs(float64(g)-want[i]))
					if math.IsNaN(float64(g)) {
						worst = math.Inf(1)
					}
				}
				if worst > 1e-4 {
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
