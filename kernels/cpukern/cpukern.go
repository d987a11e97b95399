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
// per block of rows rather than per row.
type Rows func(k int, w []byte, wstride int, x []byte, out []float32)

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
