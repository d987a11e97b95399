// Package cpukern is the registry between the CPU runner and the native
// (assembly) kernels: a kernel package registers, at init and only for the
// instruction sets the CPU has, fast versions of kernels whose results are
// defined elsewhere (a kernels/cpugen order, or quant's x86 rounding). The
// runner asks for the order it needs and falls back to the portable code
// when nothing is registered, so every architecture runs the same numbers.
package cpukern

import (
	"sort"
	"sync"

	"github.com/jitllm/jitllm/kernels/quant"
)

// Dot is one row dot product: a weight row of n values in its stored type
// with an activation row quantized to the weight type's partner type
// (quant.VecDotType).
type Dot func(n int, w, x []byte) float32

// Tile computes a TileW×TileX block of outputs in one pass, each weight row
// decoded once for all TileX activation rows:
//
//	out[i*ostride+j] = dot(n, w[j*wstride:], x[i*xstride:])  for j < TileW, i < TileX
//
// Every element equals what the kernel's Dot returns for that pair, bit for bit.
type Tile func(n int, w []byte, wstride int, x []byte, xstride int, out []float32, ostride int)

// Rows is the decode form of a Dot: one activation row x against n weight
// rows wstride bytes apart, in one call,
//
//	out[j] = dot(k, w[j*wstride:], x)  for j < len(out)
//
// each element what the kernel's Dot returns for that pair, bit for bit.
// One call per decode task, so the dispatch and bounds checks are paid once
// per block of rows rather than per row. The kernel prefetches weights pf
// bytes ahead of the block it reads (decode streams each row once from
// DRAM; runtime/tune measures pf per shape, DefaultPrefetch otherwise): a
// prefetch never changes a result.
type Rows func(k int, w []byte, wstride int, x []byte, out []float32, pf int)

// DefaultPrefetch is a Rows kernel's prefetch distance where none was
// measured: the best of 1-4 KiB on the 2-core AVX-512 host.
const DefaultPrefetch = 2048

// Kernel is one native implementation of a dot-product order.
type Kernel struct {
	Order string     // the kernels/cpugen function whose results it reproduces bit for bit, e.g. "DotQ8_0AVX2"
	Type  quant.Type // the weight type
	ISA   string     // instruction set it needs, e.g. "avx2", "avx512vnni"
	Rank  int        // higher is preferred when several are registered for one order
	Dot   Dot
	Tile  Tile // optional
	TileW int
	TileX int
	Rows  Rows // optional: used for a single activation row
	// Small are optional 1×X tiles for fewer activation rows than TileX,
	// largest X first, each element bit for bit the Dot's: a few concurrent
	// decode streams then share one read of each weight row.
	Small []SmallTile
}

// SmallTile is a 1×X Tile (TileW 1, TileX X).
type SmallTile struct {
	X    int
	Tile Tile
}

// Quantizer quantizes one activation row to a partner type exactly as
// quant.QuantizeRowX86 does.
type Quantizer struct {
	Type     quant.Type // Q8_0, Q8_K, ...
	ISA      string
	Rank     int
	Quantize func(x []float32, dst []byte)
}

var (
	mu     sync.RWMutex
	dots   = map[string][]Kernel{}
	quants = map[quant.Type][]Quantizer{}
)

// Register adds a kernel. Call it from init, only when the CPU supports k.ISA.
func Register(k Kernel) {
	mu.Lock()
	defer mu.Unlock()
	l := append(dots[k.Order], k)
	sort.SliceStable(l, func(a, b int) bool { return l[a].Rank > l[b].Rank })
	dots[k.Order] = l
}

// RegisterQuantizer adds an activation quantizer (from init, when supported).
func RegisterQuantizer(q Quantizer) {
	mu.Lock()
	defer mu.Unlock()
	l := append(quants[q.Type], q)
	sort.SliceStable(l, func(a, b int) bool { return l[a].Rank > l[b].Rank })
	quants[q.Type] = l
}

// Lookup returns the preferred native kernel for an order.
func Lookup(order string) (Kernel, bool) {
	mu.RLock()
	defer mu.RUnlock()
	l := dots[order]
	if len(l) == 0 {
		return Kernel{}, false
	}
	return l[0], true
}

// All returns every kernel registered for an order, preferred first (for
// tests and tuning).
func All(order string) []Kernel {
	mu.RLock()
	defer mu.RUnlock()
	return append([]Kernel(nil), dots[order]...)
}

// LookupQuantizer returns the preferred native quantizer for a partner type.
func LookupQuantizer(t quant.Type) (Quantizer, bool) {
	mu.RLock()
	defer mu.RUnlock()
	l := quants[t]
	if len(l) == 0 {
		return Quantizer{}, false
	}
	return l[0], true
}

// Orders lists the orders that have a native kernel, sorted.
func Orders() []string {
	mu.RLock()
	defer mu.RUnlock()
	var o []string
	for k := range dots {
		o = append(o, k)
	}
	sort.Strings(o)
	return o
}

// Attention is a native version of the inner loops of runtime/exec's f16
// attention (ggml's CPU flash attention with an f16 KV cache), bit for bit.
type Attention struct {
	ISA  string
	Rank int
	// Dot sets out[r], for r < len(out), to the dot of q (f16 values held
	// as float32, a multiple of 64 of them) with the f16 key row
	// k[r*stride:], in ggml_vec_dot_f16's AVX-512 order: 64 lanes of FMAs,
	// halved pairwise (cpugen.AttentionSeq's dot0..dot63, before its
	// float64 tail).
	Dot func(q []float32, k []uint16, stride int, out []float32)
	// Accum runs, for r < len(vs), acc = f16(acc*ms[r]) where ms[r] != 1,
	// then acc = f16(fma(v[r*stride+d], vs[r], acc)) for every d < len(acc)
	// (a multiple of 8), rounding to nearest even (quant.F32ToF16).
	Accum func(acc []float32, v []uint16, stride int, vs, ms []float32)
}

var attns []Attention

// RegisterAttention adds an attention kernel (from init, when supported).
func RegisterAttention(a Attention) {
	mu.Lock()
	defer mu.Unlock()
	attns = append(attns, a)
	sort.SliceStable(attns, func(i, j int) bool { return attns[i].Rank > attns[j].Rank })
}

// LookupAttention returns the preferred native attention kernel.
func LookupAttention() (Attention, bool) {
	mu.RLock()
	defer mu.RUnlock()
	if len(attns) == 0 {
		return Attention{}, false
	}
	return attns[0], true
}

// AllAttention returns every registered attention kernel, preferred first.
func AllAttention() []Attention {
	mu.RLock()
	defer mu.RUnlock()
	return append([]Attention(nil), attns...)
}

// Elementwise holds native versions of runtime/exec's per-element loops,
// bit for bit; a nil field means that loop has none.
type Elementwise struct {
	ISA  string
	Rank int
	// SiLU sets y[i] = x[i]/(1+e) for i < len(x)&^15, e being
	// quant.ExpfAVX512(0-x[i]) (ggml's AVX512 ggml_v_silu on blocks of
	// 16), and leaves the rest of y alone; len(y) >= len(x).
	SiLU func(x, y []float32)
	// Exp sets y[i] = math.Exp(x[i]) for i < len(x), bit for bit with
	// math.Exp on this CPU; len(y) >= len(x).
	Exp func(x, y []float64)
	// Add and Mul set y[i] = a[i]+b[i] (a[i]·b[i]) for i < len(y);
	// len(a), len(b) >= len(y).
	Add, Mul func(a, b, y []float32)
	// Scale sets y[i] = x[i]·s, then times w[i] when w is not nil (each
	// product rounded to float32: cpugen.RMSNorm's last loop), for
	// i < len(y); len(x), len(w) >= len(y).
	Scale func(x []float32, s float32, w, y []float32)
	// F16 sets y[i] = quant.F32ToF16(x[i]) for i < len(x); len(y) >= len(x).
	F16 func(x []float32, y []uint16)
}

var elems []Elementwise

// RegisterElementwise adds per-element kernels (from init, when supported).
func RegisterElementwise(e Elementwise) {
	mu.Lock()
	defer mu.Unlock()
	elems = append(elems, e)
	sort.SliceStable(elems, func(i, j int) bool { return elems[i].Rank > elems[j].Rank })
}

// LookupElementwise returns the preferred per-element kernels.
func LookupElementwise() (Elementwise, bool) {
	mu.RLock()
	defer mu.RUnlock()
	if len(elems) == 0 {
		return Elementwise{}, false
	}
	return elems[0], true
}

// AllElementwise returns every registered per-element set, preferred first.
func AllElementwise() []Elementwise {
	mu.RLock()
	defer mu.RUnlock()
	return append([]Elementwise(nil), elems...)
}

// AttentionQ8 is a native version of the inner loops of runtime/exec's
// attention over a q8_0 KV cache (cpugen.AttentionSeqQ8_0: ggml's CPU
// flash attention with K and V in q8_0), bit for bit. The cache holds
// each row's int8 quants at the value's index and its blocks' f16 scales
// at index/32; stride (values between rows) is a multiple of 32.
type AttentionQ8 struct {
	ISA  string
	Rank int
	// Dot sets out[r], for r < len(out), to the Q8_0 dot of the query
	// (quants qq, a multiple of 32 of them and at least 64; scales qd,
	// one a block) with key row r (quants kq[r*stride:], scales
	// ks[r*stride/32:]) in cpugen.AttentionSeqQ8_0's order: from 0, for
	// each block in order, dot += float32(qd*ks)*float32(Σ qq·kq), each
	// product and sum rounded to float32 (the sums are exact).
	Dot func(qq []byte, qd []float32, kq []byte, ks []uint16, stride int, out []float32)
	// Accum runs, for r < len(w), acc = acc*ms[r] where ms[r] != 1, then
	// acc[d] = fma(float32(int8(vq[r*stride+d]))*vd_b, w[r], acc[d]) for
	// every d < len(acc) (a multiple of 32), vd_b the f16 scale
	// vd[r*stride/32+d/32]: the product is exact and the fma rounds once
	// (quant.FMA32).
	Accum func(acc []float32, vq []byte, vd []uint16, stride int, w, ms []float32)
}

var attnsQ8 []AttentionQ8

// RegisterAttentionQ8 adds a q8_0 attention kernel (from init, when
// supported).
func RegisterAttentionQ8(a AttentionQ8) {
	mu.Lock()
	defer mu.Unlock()
	attnsQ8 = append(attnsQ8, a)
	sort.SliceStable(attnsQ8, func(i, j int) bool { return attnsQ8[i].Rank > attnsQ8[j].Rank })
}

// LookupAttentionQ8 returns the preferred native q8_0 attention kernel.
func LookupAttentionQ8() (AttentionQ8, bool) {
	mu.RLock()
	defer mu.RUnlock()
	if len(attnsQ8) == 0 {
		return AttentionQ8{}, false
	}
	return attnsQ8[0], true
}

// AllAttentionQ8 returns every registered q8_0 attention kernel, preferred
// first.
func AllAttentionQ8() []AttentionQ8 {
	mu.RLock()
	defer mu.RUnlock()
	return append([]AttentionQ8(nil), attnsQ8...)
}
