package ptx_test

import (
	"strings"
	"testing"

	k "github.com/jitllm/jitllm/dsl/kernel"
	"github.com/jitllm/jitllm/dsl/kernel/ptx"
)

// renderSM90 is k's PTX for sm_90 and its launch plan.
func renderSM90(t *testing.T, k *k.Kernel) (string, ptx.Launch) {
	t.Helper()
	src, err := ptx.Render(k, ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ptx.Plan(k, ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	return src, l
}

// blockKernel is a CTA-per-block product with operands of kind ak.
func blockKernel(sh k.BlockShape, ak k.Kind) *k.Kernel {
	b := k.New("blk")
	x, w, y := b.Buffer("x", ak), b.Buffer("w", k.U16), b.Buffer("y", k.F32)
	b.ParallelFor("t", 0, 4, func(t k.Expr) {
		b.BlockMatMul(sh, k.TileOperand{Buf: x, Off: t.Mul(64), Stride: k.I(64), Rows: k.I(300)},
			k.TileOperand{Buf: w, Off: k.I(0), Stride: k.I(64), Rows: k.I(200)}, k.I(64),
			k.TileOperand{Buf: y, Off: k.I(0), Stride: k.I(200), Rows: k.I(300)}, k.I(200))
	})
	return b.MustBuild()
}

// A block product renders as a cp.async pipeline feeding ldmatrix and
// mma.sync, a CTA per grid iteration with its stages in dynamic shared
// memory; f32 activations go through registers instead; before sm_80 it
// is refused.
func TestBlockRenders(t *testing.T) {
	sh := k.BlockShape{WM: 2, WN: 2, M: 2, N: 4} // 64×64, 128 threads
	kern := blockKernel(sh, k.U16)
	src, l := renderSM90(t, kern)
	// stages of (64+64) rows of 80 bytes: 4 fit 96 KiB
	if l.Group != 128 || l.Shared != 4*128*80 {
		t.Errorf("launch %+v, want a CTA of 128 with %d bytes of shared memory", l, 4*128*80)
	}
	// each thread copies (64+64)·4/128 = 4 chunks a stage: 3 prologue
	// stages and the loop's; a k step loads M + N/2 fragments, two steps a
	// stage; M·N mma a step
	for ins, want := range map[string]int{
		"cp.async.cg.shared.global": 4 * 4, "ldmatrix.sync.aligned.m8n8.x4.shared.b16": 2 * (2 + 2),
		"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": 2 * 8, "cp.async.wait_group 2": 1,
		"bar.sync 0": 3, "st.global.f32": 2 * 2 * 4 * 2, ".extern .shared .align 16 .b8": 1, "ld.global": 0,
	} {
		if got := strings.Count(src, ins); got != want {
			t.Errorf("%s: %d, want %d", ins, got, want)
		}
	}
	src32, err := ptx.Render(blockKernel(sh, k.F32), ptx.Target{SM: 90})
	if err != nil {
		t.Fatal(err)
	}
	// x's 2 chunks a stage through registers (two 16-byte loads each,
	// prologue and loop), w's with cp.async
	for ins, want := range map[string]int{"ld.global.v4.f32": 2 * 2 * 4, "st.shared.v4.b32": 2 * 4, "cp.async.cg.shared.global": 2 * 4} {
		if got := strings.Count(src32, ins); got != want {
			t.Errorf("f32 x: %s: %d, want %d", ins, got, want)
		}
	}
	if _, err := ptx.Render(kern, ptx.Target{SM: 75}); err == nil || !strings.Contains(err.Error(), "sm_80") {
		t.Errorf("sm_75: %v", err)
	}
}

// With Target.WGMMA a block product renders for sm_90a: stages unpadded
// in wgmma's layout, the async-proxy fence before the barrier, one
// wgmma.mma_async per 64 rows of a and k step, no ldmatrix or mma.sync;
// shapes that are not one warpgroup, and other targets, are refused.
func TestBlockRendersWGMMA(t *testing.T) {
	tg := ptx.Target{SM: 90, WGMMA: true}
	sh := k.BlockShape{WM: 2, WN: 2, M: 4, N: 8} // 128×128, 128 threads
	kern := blockKernel(sh, k.U16)
	src, err := ptx.Render(kern, tg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ptx.Plan(kern, tg)
	if err != nil {
		t.Fatal(err)
	}
	// stages of (128+128) rows of 64 bytes: the pipeline's 4 (6 would fit 96 KiB)
	if l.Group != 128 || l.Shared != 4*256*64 {
		t.Errorf("launch %+v, want a CTA of 128 with %d bytes of shared memory", l, 4*256*64)
	}
	for ins, want := range map[string]int{
		".target sm_90a": 1, ".version 8.0": 1, "fence.proxy.async.shared::cta": 1,
		"wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16": 2 * 2, "wgmma.fence.sync.aligned": 1,
		"wgmma.commit_group.sync.aligned": 1, "wgmma.wait_group.sync.aligned 0": 1,
		"ldmatrix": 0, "mma.sync": 0, "st.global.f32": 2 * 2 * 16 * 2,
	} {
		if got := strings.Count(src, ins); got != want {
			t.Errorf("%s: %d, want %d", ins, got, want)
		}
	}
	// a thread's first chunk: row tid/4's core matrix tid%4 (·128), its row
	// in the group (·16), the group (·512)
	for _, want := range []string{"shl.b32", "mad.lo.u32 %r", ", 512, "} {
		if !strings.Contains(src, want) {
			t.Errorf("no %q in the chunk offsets", want)
		}
	}
	// with a stage's products in flight: wait for all but one group, the
	// copies after them, and a last wait before the sums are stored
	over, err := ptx.Render(kern, ptx.Target{SM: 90, WGMMA: true, WGMMAOverlap: true})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := strings.Index(over, "wgmma.wait_group.sync.aligned 1"), strings.LastIndex(over, "cp.async.cg.shared.global"); a < 0 || b < a {
		t.Errorf("overlap: the loop's copies (last at %d) do not follow the wait for all but one group (%d)", b, a)
	}
	if a, b := strings.Index(over, "wgmma.wait_group.sync.aligned 0"), strings.Index(over, "st.global.f32"); a < 0 || b < a {
		t.Errorf("overlap: the sums are stored (%d) before the last wait (%d)", b, a)
	}
	if _, err := ptx.Render(blockKernel(k.BlockShape{WM: 2, WN: 4, M: 4, N: 4}, k.U16), tg); err == nil || !strings.Contains(err.Error(), "warpgroup") {
		t.Errorf("8 warps on wgmma: %v", err)
	}
	if _, err := ptx.Render(kern, ptx.Target{SM: 80, WGMMA: true}); err == nil || !strings.Contains(err.Error(), "sm_90a") {
		t.Errorf("wgmma on sm_80: %v", err)
	}
}

// A block attention renders as flash attention: cp.async copies of each
// cache block, ldmatrix for the keys, ldmatrix.trans for the values, the
// softmax in ex2 with the rows' maxima and sums over quads, a CTA per grid
// iteration with two stages of both caches in dynamic shared memory.
func TestBlockAttentionRenders(t *testing.T) {
	const hd = 64
	b := k.New("attn")
	q, kc, vc, y := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16), b.Buffer("y", k.F32)
	b.ParallelFor("c", 0, 4, func(c k.Expr) {
		b.BlockAttention(k.AttnShape{Warps: 4, HD: hd},
			k.TileOperand{Buf: q, Off: c.Mul(64 * hd), Stride: k.I(hd), Rows: k.I(64)},
			k.TileOperand{Buf: kc, Off: k.I(0), Stride: k.I(hd)}, k.TileOperand{Buf: vc, Off: k.I(0), Stride: k.I(hd)},
			k.TileOperand{Buf: y, Off: c.Mul(64 * hd), Stride: k.I(hd)}, c.Mul(64).Add(1), k.F(0.125), nil)
	})
	src, l := renderSM90(t, b.MustBuild())
	if want := 2 * 2 * k.AttnBlock * (2*hd + 16); l.Group != 128 || l.Shared != want {
		t.Errorf("launch %+v, want a CTA of 128 with %d bytes of shared memory", l, want)
	}
	// groups that share memory are CTAs of their own, even a warp's
	if got := (ptx.Launch{Group: 32, Shared: 1024}).CTA(4096, 128); got != 32 {
		t.Errorf("a warp with shared memory launched in CTAs of %d", got)
	}
	if got := (ptx.Launch{Group: 32}).CTA(4096, 128); got != 128 {
		t.Errorf("warps without shared memory launched in CTAs of %d, want 128", got)
	}
	// scores: hd/16 k steps × 4 fragment loads, 2 mma each; values: 4 k
	// steps × hd/16 loads, 2 mma each; 2 rescales and 32 weights a lane;
	// quads' maxima and sums for 2 rows; 64 rows × 8 chunks of each cache
	// over 128 threads, prologue and loop
	for ins, want := range map[string]int{
		"ldmatrix.sync.aligned.m8n8.x4.shared.b16": hd / 16 * 4, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16": 4 * hd / 16,
		"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": 2*hd/16*4 + 2*4*hd/16, "ex2.approx.ftz.f32": 2 + 32,
		"shfl.sync.bfly.b32": 8, "cp.async.cg.shared.global": 2 * 2 * 4, "st.global.v2.f32": 2 * hd / 8,
	} {
		if got := strings.Count(src, ins); got != want {
			t.Errorf("%s: %d, want %d", ins, got, want)
		}
	}
}

// A block attention's Q8_0 output: per block a quad maximum, the scale by
// lane 0, the quants as byte pairs.
func TestBlockAttentionQ8_0Renders(t *testing.T) {
	const hd = 64
	b := k.New("attnq")
	q, kc, vc, y := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16), b.Buffer("y", k.F32)
	xq, xd := b.Buffer("xq", k.U8), b.Buffer("xd", k.F32)
	b.ParallelFor("c", 0, 4, func(c k.Expr) {
		b.BlockAttention(k.AttnShape{Warps: 1, HD: hd},
			k.TileOperand{Buf: q, Off: c.Mul(hd), Stride: k.I(4 * hd), Rows: k.I(1)},
			k.TileOperand{Buf: kc, Off: k.I(0), Stride: k.I(hd)}, k.TileOperand{Buf: vc, Off: k.I(0), Stride: k.I(hd)},
			k.TileOperand{Buf: y, Off: c.Mul(hd), Stride: k.I(4 * hd)}, k.I(9), k.F(0.125),
			&k.AttnQuant{Quants: k.TileOperand{Buf: xq, Off: c.Mul(hd), Stride: k.I(4 * hd)}, Scales: k.TileOperand{Buf: xd, Off: c.Mul(hd / 32), Stride: k.I(4 * hd / 32)}})
	})
	src, _ := renderSM90(t, b.MustBuild())
	// two rows a lane (g and g+8), hd/32 blocks each: 2 shuffles a block,
	// a scale, 4 tiles of byte pairs
	blocks := 2 * hd / 32
	for ins, want := range map[string]int{"cvt.rni.s32.f32": blocks * 8, "st.global.u16": blocks * 4, "cvt.rn.f16.f32": blocks, "st.global.f32": blocks} {
		if got := strings.Count(src, ins); got != want {
			t.Errorf("%s: %d, want %d", ins, got, want)
		}
	}
}

// A partial block attention (BlockAttentionPart) stores its rows' outputs
// unnormalized (no reciprocal of the sums), then each row's maximum back in
// natural units and its sum as a pair from lane 0 of the quad; its copies
// start at the range's block (a guarded prologue) and its positions end
// below the range's bound.
func TestBlockAttentionPartRenders(t *testing.T) {
	const hd = 64
	b := k.New("attnpart")
	q, kc, vc, y := b.Buffer("q", k.F32), b.Buffer("kc", k.U16), b.Buffer("vc", k.U16), b.Buffer("y", k.F32)
	b.ParallelFor("c", 0, 8, func(c k.Expr) {
		lo := c.Mul(128)
		b.BlockAttentionPart(k.AttnShape{Warps: 1, HD: hd},
			k.TileOperand{Buf: q, Off: k.I(0), Stride: k.I(hd), Rows: k.I(1)},
			k.TileOperand{Buf: kc, Off: k.I(0), Stride: k.I(hd)}, k.TileOperand{Buf: vc, Off: k.I(0), Stride: k.I(hd)},
			k.TileOperand{Buf: y, Off: c.Mul(hd + 2), Stride: k.I(hd + 2)}, k.I(1000), lo, lo.Add(128), k.F(0.125))
	})
	src, _ := renderSM90(t, b.MustBuild())
	// rows g and g+8 a lane: hd/8 output pairs and an (m, l) pair each, m
	// times ln 2 each; the range's bound taken into both rows' limits and
	// the block count; 2 caches × 2 copies (prologue, loop) × 16 rows
	for ins, want := range map[string]int{
		"rcp.rn.f32": 0, "0f3F317218": 2, "st.global.v2.f32": 2*hd/8 + 2, "min.u32": 3, "cp.async.cg.shared.global": 2 * 2 * 16,
	} {
		if got := strings.Count(src, ins); got != want {
			t.Errorf("%s: %d, want %d", ins, got, want)
		}
	}
	if !strings.Contains(src, "setp.eq.and.u32") {
		t.Error("no quad lane 0 predicate for the maximum and sum")
	}
	// the plain form is unchanged by the partial's registers
	b2 := k.New("attnwhole")
	q2, kc2, vc2, y2 := b2.Buffer("q", k.F32), b2.Buffer("kc", k.U16), b2.Buffer("vc", k.U16), b2.Buffer("y", k.F32)
	b2.ParallelFor("c", 0, 8, func(c k.Expr) {
		b2.BlockAttention(k.AttnShape{Warps: 1, HD: hd},
			k.TileOperand{Buf: q2, Off: k.I(0), Stride: k.I(hd), Rows: k.I(1)},
			k.TileOperand{Buf: kc2, Off: k.I(0), Stride: k.I(hd)}, k.TileOperand{Buf: vc2, Off: k.I(0), Stride: k.I(hd)},
			k.TileOperand{Buf: y2, Off: c.Mul(hd), Stride: k.I(hd)}, k.I(1000), k.F(0.125), nil)
	})
	if whole, _ := renderSM90(t, b2.MustBuild()); strings.Contains(whole, "0f3F317218") || strings.Count(whole, "rcp.rn.f32") != 2 {
		t.Error("the whole attention renders a partial's store or lacks its reciprocals")
	}
}
