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
// at positions 0 and 1536 and one of 37 rows at position 300, and one-row
// steps from position 5 to 16383 (AttentionBlockD<hd>W1, AttentionBlockHeads
// and AttentionBlockSplit + AttentionMerge in the first long step's pieces to
// four times as many), and logs their times beside AttentionSplit +
// AttentionMerge's on the same step.
func TestGPUAttentionBlock(t *testing.T) {
	chunks0 := decodeSplits[0].chunks
	maxChunks := 4 * max(chunks0, ops.AttnSplitChunks)
	c, s := tensorCoreStream(t)
	split, merge := ops.AttentionSplit(), ops.AttentionMerge()
	blocks := map[int]*kernel.Kernel{64: ops.AttentionBlock(64), 128: ops.AttentionBlock(128)}
	ones := map[int]*kernel.Kernel{64: ops.AttentionBlockWarps(64, 1), 128: ops.AttentionBlockWarps(128, 1)}
	q8s := map[int]*kernel.Kernel{64: ops.AttentionBlockQ8_0(64, 1), 128: ops.AttentionBlockQ8_0(128, 1)}
	bsplits := map[int]*kernel.Kernel{64: ops.AttentionBlockSplit(64), 128: ops.AttentionBlockSplit(128)}
	// a CTA a key-value group, of one warp and split over 2 and (where
	// their stages fit, attnSplitShared) 4
	groups := map[int][]*kernel.Kernel{}
	ks := []*kernel.Kernel{split, merge, blocks[64], blocks[128], ones[64], ones[128], q8s[64], q8s[128], bsplits[64], bsplits[128]}
	for hd, ws := range map[int][]int{64: {1, 2, 4}, 128: {1, 2}} {
		for _, w := range ws {
			groups[hd] = append(groups[hd], ops.AttentionBlockHeadsSplit(hd, false, w))
		}
		ks = append(ks, groups[hd]...)
	}
	mod, tg := loadKernels(t, c, ks...)
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
		// where the long decode step's split pays (decodeSplits)
		{"llama-3.1-8b", 128, 32, 8, 1, 255}, {"llama-3.1-8b", 128, 32, 8, 1, 1023}, {"llama-3.1-8b", 128, 32, 8, 1, 4095},
		{"qwen3-0.6b", 128, 16, 8, 1, 8191}, {"llama-3.2-1b", 64, 32, 8, 1, 2047}, {"llama-3.1-8b", 128, 32, 8, 1, 16383},
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
		ns, np := sh.heads*sh.rows*ctx, ops.AttnPartLen(sh.rows*sh.heads, maxChunks, sh.hd)
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
		if sh.rows == 1 {
			checkAttnQ8_0(t, c, s, mod, tg, q8s[sh.hd], yd, []cuda.Buffer{qd, kd, vd, stepd}, len(q), len(kc), sh.heads, group, dim, scale)
			// a CTA a key-value group (AttentionBlockHeads, split or not),
			// same arguments
			for _, gk := range groups[sh.hd] {
				runGroup := launcher(t, mod, tg, s, gk, ba, ptx.Elems(len(q)), ptx.Elems(len(kc)), ptx.Elems(len(vc)), ptx.Elems(2), ptx.Elems(len(q)), sh.heads, group, dim, scale)
				if err := yd.Upload(f32Bytes(nans(len(q)))); err != nil {
					t.Fatal(err)
				}
				runGroup()
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				gworst := attnError(t, yd, q, kc, vc, sh.pos, sh.hd, sh.heads, group, dim, scale)
				if gworst > 1e-3 || math.IsNaN(gworst) {
					t.Errorf("%s at position %d: %s differs from the reference by %.3g", sh.name, sh.pos, gk.Name, gworst)
				}
				t.Logf("%s heads, 1 rows at position %d: %s %.1f µs (within %.2g)", sh.name, sh.pos, gk.Name, deviceMicros(t, c, s, 10, runGroup), gworst)
			}
			runBlock() // y as AttentionBlock leaves it, for what follows
		}
		runSplit, runMerge := attnSplitMerge(t, mod, tg, s, split, merge,
			attnBufs{q: qd, kc: kd, vc: vd, part: pd, step: stepd, sc: sd, y: yd, nq: len(q), nkc: len(kc), nvc: len(vc), np: np, ns: ns},
			sh.hd, sh.heads, group, dim, ctx, ops.AttnSplitChunks, scale)
		bu := deviceMicros(t, c, s, 10, runBlock)
		su := deviceMicros(t, c, s, 5, func() { runSplit(); runMerge() })
		t.Logf("%s heads, %d rows at position %d: %s %.1f µs (within %.2g of the reference), AttentionSplit+Merge %.1f µs", sh.name, sh.rows, sh.pos, bk.Name, bu, bworst, su)
		// the long decode step's attention: AttentionBlockSplit's pieces
		// (a CTA a group's heads and piece) folded by the same merge, the
		// positions cut in the first long step's pieces, twice and
		// four times as many
		for chunks := chunks0; sh.rows == 1 && chunks <= 4*chunks0; chunks *= 2 {
			_, runMerge := attnSplitMerge(t, mod, tg, s, split, merge,
				attnBufs{q: qd, kc: kd, vc: vd, part: pd, step: stepd, sc: sd, y: yd, nq: len(q), nkc: len(kc), nvc: len(vc), np: np, ns: ns},
				sh.hd, sh.heads, group, dim, ctx, chunks, scale)
			sa := cuda.NewArgs(18)
			for i, b := range []struct {
				p cuda.Buffer
				n int
			}{{qd, len(q)}, {kd, len(kc)}, {vd, len(vc)}, {stepd, 2}, {pd, np}} {
				sa.Set(2*i, b.p.Ptr)
				sa.Set(2*i+1, uint64(b.n))
			}
			sa.Set(10, uint64(sh.heads))
			sa.Set(11, uint64(group))
			sa.Set(12, uint64(dim))
			sa.Set(13, uint64(chunks))
			sa.Set(14, uint64(math.Float32bits(scale)))
			runBSplit := launcher(t, mod, tg, s, bsplits[sh.hd], sa, ptx.Elems(len(q)), ptx.Elems(len(kc)), ptx.Elems(len(vc)), ptx.Elems(2), ptx.Elems(np), sh.heads, group, dim, chunks, scale)
			for _, b := range []cuda.Buffer{yd, pd} {
				if err := b.Upload(f32Bytes(nans(int(b.Size / 4)))); err != nil {
					t.Fatal(err)
				}
			}
			runBSplit()
			runMerge()
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			worst := attnError(t, yd, q, kc, vc, sh.pos, sh.hd, sh.heads, group, dim, scale)
			if worst > 1e-3 || math.IsNaN(worst) {
				t.Errorf("%s at position %d, %d pieces: AttentionBlockSplit+Merge differs from the reference by %.3g", sh.name, sh.pos, chunks, worst)
			}
			bs := deviceMicros(t, c, s, 10, func() { runBSplit(); runMerge() })
			ms := deviceMicros(t, c, s, 10, runMerge)
			t.Logf("%s heads at position %d: AttentionBlockSplit+Merge in %d pieces %.1f µs (the merge alone %.1f; within %.2g), %s %.1f µs", sh.name, sh.pos, chunks, bs, ms, worst, bk.Name, bu)
		}
		for _, b := range []cuda.Buffer{qd, kd, vd, stepd, yd, sd, pd} {
			b.Free()
		}
	}
}

// checkAttnQ8_0 runs AttentionBlockQ8_0 on the step of the buffers given
// (q, kc, vc, step) and checks its output equals y's (AttentionBlock's)
// and its quants and scales QuantizeQ8_0's of that output, bit for bit.
func checkAttnQ8_0(t *testing.T, c *cuda.Context, s *cuda.Stream, mod *cuda.Module, tg ptx.Target, k *kernel.Kernel, y cuda.Buffer, in []cuda.Buffer, nq, nkv, heads, group, dim int, scale float32) {
	t.Helper()
	want := make([]byte, 4*nq)
	if err := y.Download(want); err != nil {
		t.Fatal(err)
	}
	y8, xq, xd := zeroed(t, c, 4*nq), zeroed(t, c, nq), zeroed(t, c, 4*nq/32)
	defer y8.Free()
	defer xq.Free()
	defer xd.Free()
	a := cuda.NewArgs(18)
	for i, b := range []struct {
		p cuda.Buffer
		n int
	}{{in[0], nq}, {in[1], nkv}, {in[2], nkv}, {in[3], 2}, {y8, nq}, {xq, nq}, {xd, nq / 32}} {
		a.Set(2*i, b.p.Ptr)
		a.Set(2*i+1, uint64(b.n))
	}
	a.Set(14, uint64(heads))
	a.Set(15, uint64(group))
	a.Set(16, uint64(dim))
	a.Set(17, uint64(math.Float32bits(scale)))
	launcher(t, mod, tg, s, k, a, ptx.Elems(nq), ptx.Elems(nkv), ptx.Elems(nkv), ptx.Elems(2), ptx.Elems(nq), ptx.Elems(nq), ptx.Elems(nq/32), heads, group, dim, scale)()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got, gq, gd := make([]byte, 4*nq), make([]byte, nq), make([]byte, 4*nq/32)
	for _, d := range []struct {
		b   cuda.Buffer
		dst []byte
	}{{y8, got}, {xq, gq}, {xd, gd}} {
		if err := d.b.Download(d.dst); err != nil {
			t.Fatal(err)
		}
	}
	wq, wd := make([]byte, nq), make([]float32, nq/32)
	if err := kernel.Run(ops.QuantizeQ8_0(), f32sFrom(got), wq, wd); err != nil {
		t.Fatal(err)
	}
	// the same attention as AttentionBlock's (ptxas may schedule the two
	// kernels' sums apart), quantized exactly as QuantizeQ8_0 quantizes it
	wy, gy, scales := f32sFrom(want), f32sFrom(got), f32sFrom(gd)
	for i, v := range gy {
		if math.Abs(float64(v)-float64(wy[i])) > 1e-5 || math.IsNaN(float64(v)) {
			t.Fatalf("%s value %d: %v, AttentionBlock's %v", k.Name, i, v, wy[i])
		}
	}
	for i := range wq {
		if gq[i] != wq[i] || scales[i/32] != wd[i/32] {
			t.Fatalf("%s value %d: quant %d scale %v, QuantizeQ8_0's %d %v", k.Name, i, int8(gq[i]), scales[i/32], int8(wq[i]), wd[i/32])
		}
	}
}

// JITLLM_ATTN_WARPS splits the short attention's blocks over that many
// warps, as many as their stages fit attnSplitShared: 4 at a head width
// of 64, 2 at 128; unset, one warp.
func TestHeadsAttentionWarps(t *testing.T) {
	made := func(_ string, mk func() *kernel.Kernel) *kernel.Kernel { return mk() }
	for _, c := range []struct {
		env  string
		hd   int
		want string
	}{{"", 128, "AttentionBlockHeadsD128Q8_0"}, {"8", 128, "AttentionBlockHeadsD128S2Q8_0"}, {"8", 64, "AttentionBlockHeadsD64S4Q8_0"}, {"2", 64, "AttentionBlockHeadsD64S2Q8_0"}} {
		t.Setenv("JITLLM_ATTN_WARPS", c.env)
		k := headsAttention(made, c.hd, true)
		if k.Name != c.want {
			t.Errorf("JITLLM_ATTN_WARPS=%q, head width %d: %s, want %s", c.env, c.hd, k.Name, c.want)
		}
		lp, err := ptx.Plan(k, ptx.Target{SM: 90})
		if err != nil {
			t.Fatal(err)
		}
		if lp.Shared+lp.Stages > attnSplitShared {
			t.Errorf("%s: %d bytes of shared memory, over %d", k.Name, lp.Shared+lp.Stages, attnSplitShared)
		}
	}
}
