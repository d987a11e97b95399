// Package opstest makes test data for the kernels of kernels/ops, shared by
// the interpreter's tests and the generated code's.
package opstest

import (
	"math"
	"math/rand/v2"

	"github.com/jitllm/jitllm/kernels/ops"
	"github.com/jitllm/jitllm/kernels/quant"
)

// Type is the quant type named name ("Q4_0", "F16", "Q8_K", …).
func Type(name string) quant.Type {
	t, ok := quant.ParseType(name)
	if !ok {
		panic("opstest: no quant type " + name)
	}
	return t
}

// Row is n values of type t encoded from the floats v (uniform in [-s, s)
// when v is nil): weights through the reference quantizer, activations
// through the x86 one, as the CPU matmul makes them.
func Row(t quant.Type, n int, v []float32, r *rand.Rand) []byte {
	if v == nil {
		v = Floats(n, 1, r)
	}
	b := make([]byte, quant.RowSize(t, n))
	if err := quant.QuantizeRowX86(t, v, b); err != nil {
		panic(err)
	}
	return b
}

// DotArgs is (n, w, x) for dot kernel d: random weights of d.W (random
// blocks with sane scales where a BlockDecode describes them) and a row
// quantized to d.X.
func DotArgs(d ops.Dot, n int, r *rand.Rand) []any {
	var w []byte
	for _, b := range ops.Blocks() {
		if b.Name == d.W {
			w = Blocks(b, n/b.QK, r)
		}
	}
	if w == nil {
		w = Row(Type(d.W), n, nil, r)
	}
	return []any{n, w, Row(Type(d.X), n, nil, r)}
}

// Variants are the hand-written kernels/quant functions the x86 Orders of
// the dot kernels must reproduce, by kernel name.
var Variants = map[string]func(n int, w, x []byte) float32{
	"DotF32AVX512":     quant.DotF32AVX512,
	"DotF32TinyBLAS":   quant.DotF32TinyBLAS,
	"DotF16AVX512":     quant.DotF16AVX512,
	"DotF16TinyBLAS":   quant.DotF16TinyBLAS,
	"DotQ8_0AVX2":      quant.DotQ8_0AVX2,
	"DotQ4_0AVX2":      quant.DotQ4_0AVX2,
	"DotQ4_0Repack8x8": quant.DotQ4_0Repack8x8,
	"DotQ4_KAVX2":      DotQ4_KAVX2,
	"DotQ4_KRepack8x8": DotQ4_KRepack8x8,
	"DotQ5_KAVX2":      DotQ5_KAVX2,
	"DotQ6_KAVX2":      DotQ6_KAVX2,
}

// DotReference is the kernels/quant function dot kernel d must match bit
// for bit: its x86 variant, or quant.VecDot for ggml's generic order.
func DotReference(d ops.Dot) func(n int, w, x []byte) float32 {
	if f, ok := Variants[d.Kernel.Name]; ok {
		return f
	}
	t := Type(d.W)
	return func(n int, w, x []byte) float32 { return quant.VecDot(t, n, w, x) }
}

// Types maps each BlockDecode's name to its quant type.
var Types = map[string]quant.Type{
	"Q4_0": quant.Q4_0, "Q4_1": quant.Q4_1, "Q5_0": quant.Q5_0, "Q5_1": quant.Q5_1, "Q8_0": quant.Q8_0,
	"Q4_K": quant.Q4_K, "Q6_K": quant.Q6_K,
}

// Blocks is n random blocks of d whose f16 scales are finite and sane
// (magnitudes about 2^-10 to 2^1, either sign), every other byte random.
func Blocks(d ops.BlockDecode, n int, r *rand.Rand) []byte {
	b := make([]byte, n*d.Bytes)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		for _, off := range d.F16 {
			h := uint16(r.IntN(2))<<15 | uint16(5+r.IntN(11))<<10 | uint16(r.IntN(1024))
			b[i*d.Bytes+off], b[i*d.Bytes+off+1] = byte(h), byte(h>>8)
		}
	}
	return b
}

// Floats is n values uniform in [-s, s).
func Floats(n int, s float32, r *rand.Rand) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = (float32(2*r.Float32()) - 1) * s
	}
	return x
}

// Args is a fresh, deterministic argument list for the kernel of
// ops.Groups named name, or nil for an unknown name.
func Args(name string, seed uint64) []any {
	r := rand.New(rand.NewPCG(seed, 99))
	for _, d := range ops.Blocks() {
		switch name {
		case "Dequant" + d.Name:
			return []any{Blocks(d, 3, r), make([]float32, 3*d.QK)}
		case "MatVec" + d.Name:
			cols := 512
			return []any{Blocks(d, 7*cols/d.QK, r), Floats(cols, 1, r), make([]float32, 7)}
		}
	}
	for _, d := range ops.Dots() {
		if d.Kernel.Name == name {
			// n varies by seed so the float kernels meet their tails
			return DotArgs(d, d.QK*max(1, 16/d.QK)*(1+r.IntN(24)), r)
		}
	}
	n := 37 + r.IntN(64)
	switch name {
	case "RMSNorm":
		return []any{Floats(n, 2, r), Floats(n, 2, r), make([]float32, n), float32(1e-6)}
	case "RMSNormNoWeight":
		return []any{Floats(n, 2, r), make([]float32, n), float32(1e-6)}
	case "Softmax":
		return []any{Floats(n, 10, r), make([]float32, n)}
	case "RopeNormalSeq", "RopeNeoxSeq":
		// three rows of two heads, 48 of 64 values rotated
		freqs := make([]float32, 24)
		for i := range freqs {
			freqs[i] = 1 + r.Float32()
		}
		return []any{Floats(6*64, 2, r), make([]float32, 6*64), []int32{int32(r.IntN(500)), 3, 0}, freqs,
			64, 2, 48, float32(0.7), float32(0.25)}
	case "KVStoreSeq", "AttentionSeq":
		// rows of 4 query heads over 2 KV heads of hd values, in 2 sequences of ctx rows
		hd, heads, kvh, ctx, rows := 16+16*r.IntN(6), 4, 2, 9, 3
		dim := kvh * hd
		// distinct cache slots, as a batch's rows are (two rows storing to
		// one slot would race on a GPU)
		rowPos, rowSeq := make([]int32, rows), make([]int32, rows)
		for i, slot := range r.Perm(2 * ctx)[:rows] {
			rowPos[i], rowSeq[i] = int32(slot%ctx), int32(slot/ctx)
		}
		kc, vc := make([]uint16, 2*ctx*dim), make([]uint16, 2*ctx*dim)
		for i := range kc {
			kc[i], vc[i] = quant.F32ToF16(float32(2*r.Float32())-1), quant.F32ToF16(float32(2*r.Float32())-1)
		}
		if name == "KVStoreSeq" {
			return []any{Floats(rows*dim, 2, r), Floats(rows*dim, 2, r), kc, vc, rowPos, rowSeq, dim, ctx}
		}
		t0 := 1 + r.IntN(3)
		n := rows*heads - t0
		return []any{Floats(n*hd, 2, r), kc, vc, make([]float32, n*hd), rowPos, rowSeq,
			hd, heads, heads / kvh, dim, ctx, t0, float32(0.25)}
	case "KVStoreSeqQ8_0", "AttentionSeqQ8_0":
		return q8CacheArgs(name, r)
	case "RopeNormal", "RopeNeox":
		return []any{Floats(3*64, 2, r), make([]float32, 3*64), 1 + r.IntN(500), 64, 48, float32(10000), float32(1)}
	}
	return nil
}

// q8CacheArgs are the KVStoreSeq/AttentionSeq arguments over a q8_0 cache:
// head dims of whole blocks (32 to 128), random quants (-128 included) and
// scales of the magnitudes a cache holds.
func q8CacheArgs(name string, r *rand.Rand) []any {
	hd, heads, kvh, ctx, rows := 32*(1+r.IntN(4)), 4, 2, 9, 3
	dim := kvh * hd
	rowPos, rowSeq := make([]int32, rows), make([]int32, rows)
	for i, slot := range r.Perm(2 * ctx)[:rows] {
		rowPos[i], rowSeq[i] = int32(slot%ctx), int32(slot/ctx)
	}
	quants := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	scales := func(n int) []uint16 { // |d| in about [2^-12, 2^-5): values up to ~4
		s := make([]uint16, n)
		for i := range s {
			s[i] = quant.F32ToF16(float32(math.Ldexp(1+r.Float64(), -12+r.IntN(7))))
		}
		return s
	}
	kq, vq, ks, vs := quants(2*ctx*dim), quants(2*ctx*dim), scales(2*ctx*dim/32), scales(2*ctx*dim/32)
	if name == "KVStoreSeqQ8_0" {
		k, v := Floats(rows*dim, 2, r), Floats(rows*dim, 2, r)
		clear(v[:32]) // a zero block: scale 0, quants 0
		return []any{k, v, kq, vq, ks, vs, rowPos, rowSeq, dim, ctx}
	}
	t0 := 1 + r.IntN(3)
	n := rows*heads - t0
	qd := make([]float32, n*hd/32)
	for i := range qd {
		qd[i] = quant.F16ToF32(scales(1)[0])
	}
	return []any{quants(n * hd), qd, kq, ks, vq, vs, make([]float32, n*hd), rowPos, rowSeq,
		hd, heads, heads / kvh, dim, ctx, t0, float32(0.125)}
}
