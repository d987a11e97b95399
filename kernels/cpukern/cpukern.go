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
