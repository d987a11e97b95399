package ops

import k "github.com/jitllm/jitllm/dsl/kernel"

// The accumulation orders of ggml's x86 SIMD kernels, as Orders of the
// generic dot kernels (kernels/quant/x86variants.go has them by hand). Each
// is the same algorithm under another schedule: which partial sums exist,
// which values go to which, the tree that joins them, and where an FMA
// rounds once instead of twice.
var (
	// ggml_vec_dot_q{8,4}_0_q8_0 with AVX2 (and tinyBLAS_Q0_AVX): one f32
	// lane per four byte products (_mm256_maddubs_epi16 + madd), each lane
	// += d·sum with one FMA across blocks, hsum_float_8 at the end.
	avx2Q0 = k.Schedule{"sum": {Order: k.Order{Chunk: 4, ChunkLoop: "j", Lanes: 8, LaneLoop: "jc",
		LaneFused: true, Tree: k.TreeHalving}}}
	// the repacked q4_0_8x8 gemv/gemm: the whole block's integer sum, then
	// acc = fma(sum, dW·dX, acc).
	repack8x8 = k.Schedule{"sum": {Order: k.Order{Fused: true}}}
)

// simdF is ggml's float SIMD order for lanes f32 partials (64: four
// 16-lane AVX512 registers per step, ggml_vec_dot_f32/_f16; 16: one
// register, llamafile tinyBLAS): FMA partials, the halving reduction, and
// the tail after it, in f32 fused when f32 (GCC contracts sumf += x*y) or
// as the algorithm (double) for f16, as ggml writes them.
func simdF(lanes int, f32 bool) k.Schedule {
	o := k.Order{Lanes: lanes, LaneLoop: "i", LaneKind: k.F32, LaneFused: true, Tree: k.TreeHalving}
	if f32 {
		o.Kind, o.Fused = k.F32, true
	}
	return k.Schedule{"sum": {Order: o}}
}

// Variant is base under schedule s (over its default) as kernel name: the
// same algorithm, another order.
func Variant(base *k.Kernel, name, doc string, s k.Schedule) *k.Kernel {
	v := *base
	v.Name, v.Doc, v.Schedule = name, doc, base.Schedule.With(s)
	return &v
}

// Dots lists every row-dot kernel: ggml's generic order per type, then the
// x86 orders the CPU matmul uses to match llama.cpp.
func Dots() []Dot {
	f32, f16, q40, q80 := dotF32(), dotF16(), dotQ4_0(), legacyDot(Q8_0, PQ8_0, scaleLast)
	ds := []Dot{
		{f32, "F32", "F32", 1},
		{f16, "F16", "F16", 1},
		{q40, "Q4_0", "Q8_0", 32},
		{legacyDot(Q4_1, PQ8_1, withMin), "Q4_1", "Q8_1", 32},
		{legacyDot(Q5_0, PQ8_0, scaleFirst), "Q5_0", "Q8_0", 32},
		{legacyDot(Q5_1, PQ8_1, withMin), "Q5_1", "Q8_1", 32},
		{q80, "Q8_0", "Q8_0", 32},
		{dotQ4_K(), "Q4_K", "Q8_K", 256},
		{dotQ6_K(), "Q6_K", "Q8_K", 256},
	}
	v := func(base *k.Kernel, name, doc string, s k.Schedule, w, x string, qk int) Dot {
		return Dot{Variant(base, name, doc, s), w, x, qk}
	}
	return append(append(ds,
		v(f32, "DotF32AVX512", "is DotF32 in ggml_vec_dot_f32's AVX512 order.", simdF(64, true), "F32", "F32", 1),
		v(f32, "DotF32TinyBLAS", "is DotF32 in llamafile tinyBLAS's AVX512 order (n%16 == 0).", simdF(16, true), "F32", "F32", 16),
		v(f16, "DotF16AVX512", "is DotF16 in ggml_vec_dot_f16's AVX512 order.", simdF(64, false), "F16", "F16", 1),
		v(f16, "DotF16TinyBLAS", "is DotF16 in llamafile tinyBLAS's AVX512 order (n%16 == 0).", simdF(16, false), "F16", "F16", 16),
		v(q80, "DotQ8_0AVX2", "is DotQ8_0 in ggml's AVX2 order.", avx2Q0, "Q8_0", "Q8_0", 32),
		v(q40, "DotQ4_0AVX2", "is DotQ4_0 in ggml's AVX2 order.", avx2Q0, "Q4_0", "Q8_0", 32),
		v(q40, "DotQ4_0Repack8x8", "is DotQ4_0 in the order of ggml's repacked q4_0_8x8 kernels.", repack8x8, "Q4_0", "Q8_0", 32),
	), kDotsAVX2()...)
}
