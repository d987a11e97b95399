//go:build arm64

package neon

import (
	"fmt"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// hasASIMD is ARMv8.0's Advanced SIMD, which the NEON builds need (every
// arm64 Linux CPU has it; without it nothing registers and cpugen runs).
// hasDotProd adds FEAT_DotProd's SDOT (ARMv8.2, optional before v8.4).
var (
	hasASIMD   = cpuid.CPU.Supports(cpuid.ASIMD)
	hasDotProd = hasASIMD && cpuid.CPU.Supports(cpuid.ASIMDDP)
)

// asmRows names one generated kernel. Calls go through callRows's switch,
// not a func value: a direct call to a noescape stub keeps a Dot's local
// result off the heap.
type asmRows int

const (
	q80NEON asmRows = iota
	q4kr8NEON
	q4kNEON
	q6kNEON
	q80DotProd
	q4kr8DotProd
	q4kDotProd
	q6kDotProd
)

func callRows(f asmRows, nb int, w *byte, wstride int, x *byte, rows int, out *float32, pf int) {
	switch f {
	case q80NEON:
		q80RowsNEON(nb, w, wstride, x, rows, out, pf)
	case q4kr8NEON:
		q4kr8RowsNEON(nb, w, wstride, x, rows, out, pf)
	case q4kNEON:
		q4kRowsNEON(nb, w, wstride, x, rows, out, pf)
	case q6kNEON:
		q6kRowsNEON(nb, w, wstride, x, rows, out, pf)
	case q80DotProd:
		q80RowsDotProd(nb, w, wstride, x, rows, out, pf)
	case q4kr8DotProd:
		q4kr8RowsDotProd(nb, w, wstride, x, rows, out, pf)
	case q4kDotProd:
		q4kRowsDotProd(nb, w, wstride, x, rows, out, pf)
	case q6kDotProd:
		q6kRowsDotProd(nb, w, wstride, x, rows, out, pf)
	default:
		panic(fmt.Sprintf("neon: no kernel %d", f))
	}
}

// kind is one order's generated kernel for one build.
type kind struct {
	order  string
	t      quant.Type
	qk     int // values per block
	wbytes int // bytes per weight block
	xbytes int // bytes per activation block
	f      asmRows
	isa    string
	rank   int
	ok     bool // the CPU has isa
}

func kinds() []kind {
	return []kind{
		{"DotQ8_0AVX2", quant.Q8_0, q80QK, q80Bytes, q80Bytes, q80NEON, "neon", 10, hasASIMD},
		{"DotQ4_KRepack8x8", quant.Q4_K, qk, 144, q8kBytes, q4kr8NEON, "neon", 10, hasASIMD},
		{"DotQ4_KAVX2", quant.Q4_K, qk, 144, q8kBytes, q4kNEON, "neon", 10, hasASIMD},
		{"DotQ6_KAVX2", quant.Q6_K, qk, 210, q8kBytes, q6kNEON, "neon", 10, hasASIMD},
		{"DotQ8_0AVX2", quant.Q8_0, q80QK, q80Bytes, q80Bytes, q80DotProd, "dotprod", 20, hasDotProd},
		{"DotQ4_KRepack8x8", quant.Q4_K, qk, 144, q8kBytes, q4kr8DotProd, "dotprod", 20, hasDotProd},
		{"DotQ4_KAVX2", quant.Q4_K, qk, 144, q8kBytes, q4kDotProd, "dotprod", 20, hasDotProd},
		{"DotQ6_KAVX2", quant.Q6_K, qk, 210, q8kBytes, q6kDotProd, "dotprod", 20, hasDotProd},
	}
}

func init() {
	for _, k := range kinds() {
		if k.ok {
			cpukern.Register(cpukern.Kernel{Order: k.order, Type: k.t, ISA: k.isa, Rank: k.rank,
				Dot: dotFunc(k), Rows: rowsFunc(k)})
		}
	}
}

// check panics, as the portable code's bounds checks would, on rows too
// short for n values; the assembly reads only what it is given.
func (k kind) check(n, wlen, xlen int) int {
	if n < 0 || n%k.qk != 0 {
		panic(fmt.Sprintf("neon %s: n=%d is not a multiple of %d", k.order, n, k.qk))
	}
	nb := n / k.qk
	if wlen < nb*k.wbytes || xlen < nb*k.xbytes {
		panic(fmt.Sprintf("neon %s: n=%d needs %d weight and %d activation bytes, have %d and %d",
			k.order, n, nb*k.wbytes, nb*k.xbytes, wlen, xlen))
	}
	return nb
}

func dotFunc(k kind) cpukern.Dot {
	return func(n int, w, x []byte) float32 {
		nb := k.check(n, len(w), len(x))
		if nb == 0 {
			return 0
		}
		var out float32
		callRows(k.f, nb, &w[0], 0, &x[0], 1, &out, cpukern.DefaultPrefetch)
		return out
	}
}

func rowsFunc(k kind) cpukern.Rows {
	return func(n int, w []byte, wstride int, x []byte, out []float32, pf int) {
		rows := len(out)
		if rows == 0 {
			return // no rows: nothing to read
		}
		nb := k.check(n, len(w), len(x))
		rb := nb * k.wbytes
		if wstride < rb || len(w) < (rows-1)*wstride+rb {
			panic(fmt.Sprintf("neon %s: %d rows of %d bytes %d apart need %d weight bytes, have %d",
				k.order, rows, rb, wstride, (rows-1)*wstride+rb, len(w)))
		}
		if nb == 0 {
			clear(out)
			return
		}
		callRows(k.f, nb, &w[0], wstride, &x[0], rows, &out[0], max(pf, 0))
	}
}
