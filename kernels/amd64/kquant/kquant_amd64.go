//go:build amd64

package kquant

import (
	"fmt"
	"math"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

// hasAVX2 is what every kernel here needs: AVX2, FMA (VFMADD231PS) and
// F16C (VCVTPH2PS).
var hasAVX2 = cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3, cpuid.F16C)

// hasVNNI adds the AVX-512 of the zmm variants: F and BW (VPERMW, VPSRLVW,
// 512-bit VPMADDUBSW), VL and DQ (EVEX forms of the AVX2 epilogue), and
// VNNI's VPDPWSSD.
var hasVNNI = hasAVX2 && cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512DQ, cpuid.AVX512VL, cpuid.AVX512VNNI)

// hasAVXVNNI is AVX-VNNI (VEX VPDPWSSD on ymm) beside AVX2: Alder Lake and
// later client cores, Zen 5, which may lack AVX-512.
var hasAVXVNNI = hasAVX2 && cpuid.CPU.Supports(cpuid.AVXVNNI)

// asmDot names one generated dot (out[r] for r < its row count). Calls go
// through callDot's switch, not a func value: a direct call to a noescape
// stub keeps the caller's local out off the heap.
type asmDot int

const (
	noDot asmDot = iota // a kind's missing small tiles, or the 1×8 Tile a 2×8 replaces
	q4kDot1AVX2ID
	q4kDot8AVX2ID
	q5kDot1AVX2ID
	q5kDot8AVX2ID
	q6kDot1AVX2ID
	q6kDot8AVX2ID
	q4kr8Dot1AVX2ID
	q4kr8Dot8AVX2ID
	q4kDot1VNNIID
	q4kDot8VNNIID
	q5kDot1VNNIID
	q5kDot8VNNIID
	q6kDot1VNNIID
	q6kDot8VNNIID
	q4kr8Dot1VNNIID
	q4kDot4VNNIID
	q5kDot4VNNIID
	q6kDot4VNNIID
	q4kr8Dot4VNNIID
	q4kDot2VNNIID
	q5kDot2VNNIID
	q6kDot2VNNIID
	q4kr8Dot2VNNIID
	q4kDot1AVXVNNIID
	q4kDot8AVXVNNIID
	q5kDot1AVXVNNIID
	q5kDot8AVXVNNIID
	q6kDot1AVXVNNIID
	q6kDot8AVXVNNIID
	q4kr8Dot1AVXVNNIID
	q4kr8Dot8AVXVNNIID
)

// asmRows names one generated rows kernel (cpukern.Rows), called like
// asmDot through a switch.
type asmRows int

const (
	noRows asmRows = iota
	q4kRowsAVX2ID
	q5kRowsAVX2ID
	q6kRowsAVX2ID
	q4kr8RowsAVX2ID
	q4kRowsVNNIID
	q5kRowsVNNIID
	q6kRowsVNNIID
	q4kr8RowsVNNIID
	q4kRowsAVXVNNIID
	q5kRowsAVXVNNIID
	q6kRowsAVXVNNIID
	q4kr8RowsAVXVNNIID
)

func callRows(f asmRows, nb int, w *byte, wstride int, x *byte, rows int, out *float32, pf int) {
	switch f {
	case q4kRowsAVX2ID:
		q4kRowsAVX2(nb, w, wstride, x, rows, out, pf)
	case q5kRowsAVX2ID:
		q5kRowsAVX2(nb, w, wstride, x, rows, out, pf)
	case q6kRowsAVX2ID:
		q6kRowsAVX2(nb, w, wstride, x, rows, out, pf)
	case q4kr8RowsAVX2ID:
		q4kr8RowsAVX2(nb, w, wstride, x, rows, out, pf)
	case q4kRowsVNNIID:
		q4kRowsVNNI(nb, w, wstride, x, rows, out, pf)
	case q5kRowsVNNIID:
		q5kRowsVNNI(nb, w, wstride, x, rows, out, pf)
	case q6kRowsVNNIID:
		q6kRowsVNNI(nb, w, wstride, x, rows, out, pf)
	case q4kr8RowsVNNIID:
		q4kr8RowsVNNI(nb, w, wstride, x, rows, out, pf)
	case q4kRowsAVXVNNIID:
		q4kRowsAVXVNNI(nb, w, wstride, x, rows, out, pf)
	case q5kRowsAVXVNNIID:
		q5kRowsAVXVNNI(nb, w, wstride, x, rows, out, pf)
	case q6kRowsAVXVNNIID:
		q6kRowsAVXVNNI(nb, w, wstride, x, rows, out, pf)
	case q4kr8RowsAVXVNNIID:
		q4kr8RowsAVXVNNI(nb, w, wstride, x, rows, out, pf)
	default:
		panic(fmt.Sprintf("kquant: no rows kernel %d", f))
	}
}

func callDot(f asmDot, nb int, w, x *byte, xstride int, out *float32) {
	switch f {
	case q4kDot1AVX2ID:
		q4kDot1AVX2(nb, w, x, xstride, out)
	case q4kDot8AVX2ID:
		q4kDot8AVX2(nb, w, x, xstride, out)
	case q5kDot1AVX2ID:
		q5kDot1AVX2(nb, w, x, xstride, out)
	case q5kDot8AVX2ID:
		q5kDot8AVX2(nb, w, x, xstride, out)
	case q6kDot1AVX2ID:
		q6kDot1AVX2(nb, w, x, xstride, out)
	case q6kDot8AVX2ID:
		q6kDot8AVX2(nb, w, x, xstride, out)
	case q4kr8Dot1AVX2ID:
		q4kr8Dot1AVX2(nb, w, x, xstride, out)
	case q4kr8Dot8AVX2ID:
		q4kr8Dot8AVX2(nb, w, x, xstride, out)
	case q4kDot1VNNIID:
		q4kDot1VNNI(nb, w, x, xstride, out)
	case q4kDot8VNNIID:
		q4kDot8VNNI(nb, w, x, xstride, out)
	case q5kDot1VNNIID:
		q5kDot1VNNI(nb, w, x, xstride, out)
	case q5kDot8VNNIID:
		q5kDot8VNNI(nb, w, x, xstride, out)
	case q6kDot1VNNIID:
		q6kDot1VNNI(nb, w, x, xstride, out)
	case q6kDot8VNNIID:
		q6kDot8VNNI(nb, w, x, xstride, out)
	case q4kr8Dot1VNNIID:
		q4kr8Dot1VNNI(nb, w, x, xstride, out)
	case q4kDot4VNNIID:
		q4kDot4VNNI(nb, w, x, xstride, out)
	case q5kDot4VNNIID:
		q5kDot4VNNI(nb, w, x, xstride, out)
	case q6kDot4VNNIID:
		q6kDot4VNNI(nb, w, x, xstride, out)
	case q4kr8Dot4VNNIID:
		q4kr8Dot4VNNI(nb, w, x, xstride, out)
	case q4kDot2VNNIID:
		q4kDot2VNNI(nb, w, x, xstride, out)
	case q5kDot2VNNIID:
		q5kDot2VNNI(nb, w, x, xstride, out)
	case q6kDot2VNNIID:
		q6kDot2VNNI(nb, w, x, xstride, out)
	case q4kr8Dot2VNNIID:
		q4kr8Dot2VNNI(nb, w, x, xstride, out)
	case q4kDot1AVXVNNIID:
		q4kDot1AVXVNNI(nb, w, x, xstride, out)
	case q4kDot8AVXVNNIID:
		q4kDot8AVXVNNI(nb, w, x, xstride, out)
	case q5kDot1AVXVNNIID:
		q5kDot1AVXVNNI(nb, w, x, xstride, out)
	case q5kDot8AVXVNNIID:
		q5kDot8AVXVNNI(nb, w, x, xstride, out)
	case q6kDot1AVXVNNIID:
		q6kDot1AVXVNNI(nb, w, x, xstride, out)
	case q6kDot8AVXVNNIID:
		q6kDot8AVXVNNI(nb, w, x, xstride, out)
	case q4kr8Dot1AVXVNNIID:
		q4kr8Dot1AVXVNNI(nb, w, x, xstride, out)
	case q4kr8Dot8AVXVNNIID:
		q4kr8Dot8AVXVNNI(nb, w, x, xstride, out)
	default:
		panic(fmt.Sprintf("kquant: no kernel %d", f))
	}
}

// tile2x8Func is the repack order's 2×8 Tile (q4kr8Tile2x8VNNI): two
// weight rows wstride apart against eight activation rows.
func tile2x8Func(k kind) cpukern.Tile {
	return func(n int, w []byte, wstride int, x []byte, xstride int, out []float32, ostride int) {
		nb := check(k.order, n, k.bytes, len(w), len(x))
		rb := nb * k.bytes
		if wstride < rb || xstride < nb*q8kBytes || ostride < 2 {
			panic(fmt.Sprintf("kquant %s: strides w=%d x=%d out=%d below a row (%d, %d, 2)",
				k.order, wstride, xstride, ostride, rb, nb*q8kBytes))
		}
		if xstride > math.MaxInt32/7 {
			// the tile gathers the rows' y.d at 32-bit offsets r*xstride
			panic(fmt.Sprintf("kquant %s: x stride %d too large for the 2×8 tile", k.order, xstride))
		}
		if len(w) < wstride+rb || len(x) < 7*xstride+nb*q8kBytes || len(out) < 7*ostride+2 {
			panic(fmt.Sprintf("kquant %s: a 2×8 tile needs %d w, %d x and %d out values past the strides",
				k.order, wstride+rb, 7*xstride+nb*q8kBytes, 7*ostride+2))
		}
		var o [16]float32 // o[8u+r]
		if nb > 0 {
			q4kr8Tile2x8VNNI(nb, &w[0], wstride, &x[0], xstride, &o[0])
		}
		for r := 0; r < 8; r++ {
			out[r*ostride] = o[r]
			out[r*ostride+1] = o[8+r]
		}
	}
}

// kind is one order's generated Dot, 1×8 Tile and Rows for one ISA (the zmm ones
// rank above AVX2: about as fast or faster in the measured cases; AVX-VNNI,
// the AVX2 bodies with VPDPWSSD, between them), and its
// 1×4 and 1×2 small tiles where generated. tile2x8 replaces the 1×8 Tile
// with the 2×8 one (q4kr8Tile2x8VNNI); such a kind has no 1×8 (tile noDot).
type kind struct {
	order   string
	t       quant.Type
	bytes   int
	one     asmDot
	tile    asmDot
	rows    asmRows
	isa     string
	rank    int
	ok      bool // the CPU has isa
	small4  asmDot
	small2  asmDot
	tile2x8 bool
}

func kinds() []kind {
	return []kind{
		{"DotQ4_KAVX2", quant.Q4_K, 144, q4kDot1AVX2ID, q4kDot8AVX2ID, q4kRowsAVX2ID, "avx2", 10, hasAVX2, noDot, noDot, false},
		{"DotQ5_KAVX2", quant.Q5_K, 176, q5kDot1AVX2ID, q5kDot8AVX2ID, q5kRowsAVX2ID, "avx2", 10, hasAVX2, noDot, noDot, false},
		{"DotQ6_KAVX2", quant.Q6_K, 210, q6kDot1AVX2ID, q6kDot8AVX2ID, q6kRowsAVX2ID, "avx2", 10, hasAVX2, noDot, noDot, false},
		{"DotQ4_KRepack8x8", quant.Q4_K, 144, q4kr8Dot1AVX2ID, q4kr8Dot8AVX2ID, q4kr8RowsAVX2ID, "avx2", 10, hasAVX2, noDot, noDot, false},
		{"DotQ4_KAVX2", quant.Q4_K, 144, q4kDot1VNNIID, q4kDot8VNNIID, q4kRowsVNNIID, "avx512vnni", 20, hasVNNI, q4kDot4VNNIID, q4kDot2VNNIID, false},
		{"DotQ5_KAVX2", quant.Q5_K, 176, q5kDot1VNNIID, q5kDot8VNNIID, q5kRowsVNNIID, "avx512vnni", 20, hasVNNI, q5kDot4VNNIID, q5kDot2VNNIID, false},
		{"DotQ6_KAVX2", quant.Q6_K, 210, q6kDot1VNNIID, q6kDot8VNNIID, q6kRowsVNNIID, "avx512vnni", 20, hasVNNI, q6kDot4VNNIID, q6kDot2VNNIID, false},
		{"DotQ4_KRepack8x8", quant.Q4_K, 144, q4kr8Dot1VNNIID, noDot, q4kr8RowsVNNIID, "avx512vnni", 20, hasVNNI, q4kr8Dot4VNNIID, q4kr8Dot2VNNIID, true},
		{"DotQ4_KAVX2", quant.Q4_K, 144, q4kDot1AVXVNNIID, q4kDot8AVXVNNIID, q4kRowsAVXVNNIID, "avxvnni", 15, hasAVXVNNI, noDot, noDot, false},
		{"DotQ5_KAVX2", quant.Q5_K, 176, q5kDot1AVXVNNIID, q5kDot8AVXVNNIID, q5kRowsAVXVNNIID, "avxvnni", 15, hasAVXVNNI, noDot, noDot, false},
		{"DotQ6_KAVX2", quant.Q6_K, 210, q6kDot1AVXVNNIID, q6kDot8AVXVNNIID, q6kRowsAVXVNNIID, "avxvnni", 15, hasAVXVNNI, noDot, noDot, false},
		{"DotQ4_KRepack8x8", quant.Q4_K, 144, q4kr8Dot1AVXVNNIID, q4kr8Dot8AVXVNNIID, q4kr8RowsAVXVNNIID, "avxvnni", 15, hasAVXVNNI, noDot, noDot, false},
	}
}

func init() {
	for _, k := range kinds() {
		if !k.ok {
			continue
		}
		tile, tw := prefillTile(k)
		cpukern.Register(cpukern.Kernel{
			Order: k.order, Type: k.t, ISA: k.isa, Rank: k.rank,
			Dot: dotFunc(k), Tile: tile, TileW: tw, TileX: tileX, Rows: rowsFunc(k),
			Small: smallTiles(k),
		})
	}
	if hasAVX2 {
		cpukern.RegisterQuantizer(cpukern.Quantizer{Type: quant.Q8_K, ISA: "avx2", Rank: 10, Quantize: quantizeQ8K})
	}
}

// prefillTile is k's Tile and its weight-row count.
func prefillTile(k kind) (cpukern.Tile, int) {
	if k.tile2x8 {
		// each activation chunk loaded once for two weight rows: prefill
		// reads the activations from L2, and a 1×8 is bound by that
		return tile2x8Func(k), 2
	}
	return tileFunc(k, k.tile, tileX), 1
}

// check panics, as the portable code's bounds checks would, on rows too
// short for n values; the assembly reads only what it is given.
func check(order string, n, wb, wlen, xlen int) int {
	if n < 0 || n%qk != 0 {
		panic(fmt.Sprintf("kquant %s: n=%d is not a multiple of %d", order, n, qk))
	}
	nb := n / qk
	if wlen < nb*wb || xlen < nb*q8kBytes {
		panic(fmt.Sprintf("kquant %s: n=%d needs %d weight and %d activation bytes, have %d and %d",
			order, n, nb*wb, nb*q8kBytes, wlen, xlen))
	}
	return nb
}

func dotFunc(k kind) cpukern.Dot {
	return func(n int, w, x []byte) float32 {
		nb := check(k.order, n, k.bytes, len(w), len(x))
		if nb == 0 {
			return 0
		}
		var out float32
		callDot(k.one, nb, &w[0], &x[0], 0, &out)
		return out
	}
}

// smallTiles are k's 1×4 and 1×2 tiles, if it has them.
func smallTiles(k kind) []cpukern.SmallTile {
	if k.small4 == noDot {
		return nil
	}
	return []cpukern.SmallTile{{X: 4, Tile: tileFunc(k, k.small4, 4)}, {X: 2, Tile: tileFunc(k, k.small2, 2)}}
}

// tileFunc is the 1×tx Tile of the generated dot f.
func tileFunc(k kind, f asmDot, tx int) cpukern.Tile {
	return func(n int, w []byte, wstride int, x []byte, xstride int, out []float32, ostride int) {
		nb := check(k.order, n, k.bytes, len(w), len(x))
		rb := nb * k.bytes
		if wstride < rb || xstride < nb*q8kBytes || ostride < 1 {
			panic(fmt.Sprintf("kquant %s: strides w=%d x=%d out=%d below a row (%d, %d, 1)",
				k.order, wstride, xstride, ostride, rb, nb*q8kBytes))
		}
		if len(w) < rb || len(x) < (tx-1)*xstride+nb*q8kBytes || len(out) < (tx-1)*ostride+1 {
			panic(fmt.Sprintf("kquant %s: a 1×%d tile needs %d x and %d out values past the strides",
				k.order, tx, (tx-1)*xstride+nb*q8kBytes, (tx-1)*ostride+1))
		}
		var o [tileX]float32 // tx ≤ tileX
		if nb > 0 {
			callDot(f, nb, &w[0], &x[0], xstride, &o[0])
		}
		for i, v := range o[:tx] {
			out[i*ostride] = v
		}
	}
}

func rowsFunc(k kind) cpukern.Rows {
	return func(n int, w []byte, wstride int, x []byte, out []float32, pf int) {
		rows := len(out)
		if rows == 0 {
			return // no rows: nothing to read
		}
		nb := check(k.order, n, k.bytes, len(w), len(x))
		rb := nb * k.bytes
		if wstride < rb || len(w) < (rows-1)*wstride+rb {
			panic(fmt.Sprintf("kquant %s: %d rows of %d bytes %d apart need %d weight bytes, have %d",
				k.order, rows, rb, wstride, (rows-1)*wstride+rb, len(w)))
		}
		if nb == 0 {
			clear(out)
			return
		}
		callRows(k.rows, nb, &w[0], wstride, &x[0], rows, &out[0], pf)
	}
}

// quantizeQ8K is quant.QuantizeRowX86(quant.Q8_K, x, dst) for whole blocks.
func quantizeQ8K(x []float32, dst []byte) {
	if len(x)%qk != 0 || len(dst) < len(x)/qk*q8kBytes {
		panic(fmt.Sprintf("kquant: Q8_K of %d values into %d bytes: need a multiple of %d values and %d bytes",
			len(x), len(dst), qk, len(x)/qk*q8kBytes))
	}
	if nb := len(x) / qk; nb > 0 {
		quantQ8KAVX2(nb, &x[0], &dst[0])
	}
}
