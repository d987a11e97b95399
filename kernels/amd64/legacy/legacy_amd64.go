//go:build amd64

package legacy

import (
	"fmt"
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/kernels/cpukern"
	"github.com/jitllm/jitllm/kernels/quant"
)

type (
	asmDot  func(nb int, w, x *byte) float32
	asmTile func(nb int, w *byte, wstride int, x *byte, xstride int, out *float32, ostride int)
	// asmRows is a decode body: tiles×4 weight rows wstride apart against
	// one activation row, out[0:4·tiles], prefetching pf bytes ahead
	asmRows func(nb int, w *byte, wstride int, x *byte, out *float32, tiles int, pf int)
)

// isa is an instruction-set level a kernel needs.
type isa struct {
	name string
	has  func() bool
}

var (
	isaAVX2 = isa{"avx2", func() bool {
		return cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
	}}
	isaAVX512 = isa{"avx512", func() bool {
		return isaAVX2.has() && cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512VL)
	}}
	isaVNNI = isa{"avx512vnni", func() bool {
		return isaAVX512.has() && cpuid.CPU.Supports(cpuid.AVX512BW, cpuid.AVX512VNNI)
	}}
	// AVX-VNNI: VEX VPDPBUSD on ymm, with or without AVX-512 (Alder Lake
	// and later client cores, Zen 5)
	isaAVXVNNI = isa{"avxvnni", func() bool {
		return isaAVX2.has() && cpuid.CPU.Supports(cpuid.AVXVNNI)
	}}
)

// spec is one native kernel: its order, its assembly and the row sizes it
// reads. Quant kernels take the block count, float ones the value count.
type spec struct {
	order        string
	typ          quant.Type
	isa          isa
	rank         int
	qk           int // values per weight block (1 for floats)
	wb, xb       int // bytes per weight / activation block
	dot          asmDot
	tile         asmTile
	tileW, tileX int
	body         asmRows // optional, 4×1 tiles only: Rows' groups of four rows in one call
}

// specs lists every kernel this package has; init registers the ones the CPU
// runs. The VNNI kernels rank above the AVX2 ones: they are faster (see
// docs/perf/current.md); AVX-VNNI's (the AVX2 shapes with VPDPBUSD) rank
// between them. Each order also gets a 4×1 tile one rank lower, for
// one activation row (decode): cpukern.Lookup returns the many-row tile, a
// caller wanting the decode shape picks it from cpukern.All.
var specs = []spec{
	{"DotQ8_0AVX2", quant.Q8_0, isaAVX2, 10, 32, 34, 34, q80AVX2Dot, q80AVX2Tile2x2, 2, 2, nil},
	{"DotQ8_0AVX2", quant.Q8_0, isaAVX2, 9, 32, 34, 34, q80AVX2Dot, q80AVX2Tile4x1, 4, 1, nil},
	{"DotQ8_0AVX2", quant.Q8_0, isaVNNI, 31, 32, 34, 34, q80VNNIDot, q80VNNITile8x4, 8, 4, nil},
	{"DotQ8_0AVX2", quant.Q8_0, isaVNNI, 30, 32, 34, 34, q80VNNIDot, q80VNNITile4x4, 4, 4, nil},
	{"DotQ8_0AVX2", quant.Q8_0, isaVNNI, 29, 32, 34, 34, q80VNNIDot, q80VNNITile4x1, 4, 1, q80VNNIRows},
	{"DotQ8_0AVX2", quant.Q8_0, isaAVXVNNI, 15, 32, 34, 34, q80AVXVNNIDot, q80AVXVNNITile2x2, 2, 2, nil},
	{"DotQ8_0AVX2", quant.Q8_0, isaAVXVNNI, 14, 32, 34, 34, q80AVXVNNIDot, q80AVXVNNITile4x1, 4, 1, nil},
	{"DotQ4_0AVX2", quant.Q4_0, isaAVX2, 10, 32, 18, 34, q40AVX2Dot, q40AVX2Tile2x2, 2, 2, nil},
	{"DotQ4_0AVX2", quant.Q4_0, isaAVX2, 9, 32, 18, 34, q40AVX2Dot, q40AVX2Tile4x1, 4, 1, nil},
	{"DotQ4_0AVX2", quant.Q4_0, isaVNNI, 30, 32, 18, 34, q40VNNIDot, q40VNNITile4x4, 4, 4, nil},
	{"DotQ4_0AVX2", quant.Q4_0, isaVNNI, 29, 32, 18, 34, q40VNNIDot, q40VNNITile4x1, 4, 1, nil},
	{"DotQ4_0AVX2", quant.Q4_0, isaAVXVNNI, 15, 32, 18, 34, q40AVXVNNIDot, q40AVXVNNITile2x2, 2, 2, nil},
	{"DotQ4_0AVX2", quant.Q4_0, isaAVXVNNI, 14, 32, 18, 34, q40AVXVNNIDot, q40AVXVNNITile4x1, 4, 1, nil},
	{"DotQ4_0Repack8x8", quant.Q4_0, isaAVX2, 10, 32, 18, 34, q40RepackAVX2Dot, q40RepackAVX2Tile2x2, 2, 2, nil},
	{"DotQ4_0Repack8x8", quant.Q4_0, isaAVX2, 9, 32, 18, 34, q40RepackAVX2Dot, q40RepackAVX2Tile4x1, 4, 1, nil},
	{"DotQ4_0Repack8x8", quant.Q4_0, isaVNNI, 30, 32, 18, 34, q40RepackVNNIDot, q40RepackVNNITile4x4, 4, 4, nil},
	{"DotQ4_0Repack8x8", quant.Q4_0, isaVNNI, 29, 32, 18, 34, q40RepackVNNIDot, q40RepackVNNITile4x1, 4, 1, nil},
	{"DotQ4_0Repack8x8", quant.Q4_0, isaAVXVNNI, 15, 32, 18, 34, q40RepackAVXVNNIDot, q40RepackAVXVNNITile2x2, 2, 2, nil},
	{"DotQ4_0Repack8x8", quant.Q4_0, isaAVXVNNI, 14, 32, 18, 34, q40RepackAVXVNNIDot, q40RepackAVXVNNITile4x1, 4, 1, nil},
	{"DotMXFP4AVX2", quant.MXFP4, isaAVX2, 10, 32, 17, 34, mxfp4AVX2Dot, mxfp4AVX2Tile2x1, 2, 1, nil},
	{"DotMXFP4AVX2", quant.MXFP4, isaVNNI, 30, 32, 17, 34, mxfp4VNNIDot, mxfp4VNNITile4x2, 4, 2, nil},
	{"DotMXFP4AVX2", quant.MXFP4, isaVNNI, 29, 32, 17, 34, mxfp4VNNIDot, mxfp4VNNITile4x1, 4, 1, nil},
	{"DotF32AVX512", quant.F32, isaAVX512, 20, 1, 4, 4, f32AVX512Dot, f32AVX512Tile2x3, 2, 3, nil},
	{"DotF32TinyBLAS", quant.F32, isaAVX512, 20, 1, 4, 4, f32TinyBLASDot, f32TinyBLASTile4x4, 4, 4, nil},
	{"DotF16AVX512", quant.F16, isaAVX512, 20, 1, 2, 2, f16AVX512Dot, f16AVX512Tile2x3, 2, 3, nil},
	{"DotF16TinyBLAS", quant.F16, isaAVX512, 20, 1, 2, 2, f16TinyBLASDot, f16TinyBLASTile4x4, 4, 4, nil},
	// the AVX-512 builds' float orders on AVX2 (same lanes in ymm pairs), so
	// a CPU without AVX-512 runs them natively too
	{"DotF32AVX512", quant.F32, isaAVX2, 10, 1, 4, 4, f32AVX512OnAVX2Dot, nil, 0, 0, nil},
	{"DotF32TinyBLAS", quant.F32, isaAVX2, 10, 1, 4, 4, f32TinyBLASOnAVX2Dot, f32TinyBLASOnAVX2Tile2x2, 2, 2, nil},
	{"DotF16AVX512", quant.F16, isaAVX2, 10, 1, 2, 2, f16AVX512OnAVX2Dot, nil, 0, 0, nil},
	{"DotF16TinyBLAS", quant.F16, isaAVX2, 10, 1, 2, 2, f16TinyBLASOnAVX2Dot, f16TinyBLASOnAVX2Tile2x2, 2, 2, nil},
}

func init() {
	for _, s := range specs {
		if s.isa.has() {
			k := s.kernel()
			if d, ok := decodeTile(s); ok {
				k.Rows = s.rows(d)
			}
			cpukern.Register(k)
		}
	}
	if isaAVX2.has() {
		cpukern.RegisterQuantizer(cpukern.Quantizer{Type: quant.Q8_0, ISA: isaAVX2.name, Rank: 10, Quantize: quantizeQ8_0})
	}
}

// ptr is the slice's first byte, nil for an empty one (the assembly reads
// nothing then).
func ptr[T any](b []T) *T { return unsafe.SliceData(b) }

// need is the bytes n values take in rows of b-byte blocks of qk values.
// Callers check n/qk against the buffer first (rowFits), so it cannot
// overflow.
func need(n, qk, b int) int { return n / qk * b }

// rowFits reports whether n values (blocks of qk, b bytes each) fit in size
// bytes, without overflowing for any n.
func rowFits(size, n, qk, b int) bool { return n/qk <= size/b }

func (s spec) kernel() cpukern.Kernel {
	dot, tile := s.dot, s.tile
	units := func(n int) int { // what the assembly's nb is
		if s.qk == 1 {
			return n
		}
		return n / s.qk
	}
	k := cpukern.Kernel{
		Order: s.order, Type: s.typ, ISA: s.isa.name, Rank: s.rank,
		Dot: func(n int, w, x []byte) float32 {
			if n < 0 {
				panic(fmt.Sprintf("legacy: %s: negative length %d", s.order, n))
			}
			if !rowFits(len(w), n, s.qk, s.wb) || !rowFits(len(x), n, s.qk, s.xb) {
				panic(fmt.Sprintf("legacy: %s: %d values do not fit %d weight and %d activation bytes", s.order, n, len(w), len(x)))
			}
			return dot(units(n), ptr(w), ptr(x))
		},
		Tile: func(n int, w []byte, wstride int, x []byte, xstride int, out []float32, ostride int) {
			if n < 0 || wstride < 0 || xstride < 0 || ostride < 0 {
				panic(fmt.Sprintf("legacy: %s tile: negative length or stride (n %d, strides %d %d %d)", s.order, n, wstride, xstride, ostride))
			}
			if !rowFits(len(w), n, s.qk, s.wb) || !rowFits(len(x), n, s.qk, s.xb) ||
				!fits(len(w), s.tileW, wstride, need(n, s.qk, s.wb)) ||
				!fits(len(x), s.tileX, xstride, need(n, s.qk, s.xb)) ||
				!fits(len(out), s.tileX, ostride, s.tileW) {
				panic(fmt.Sprintf("legacy: %s tile %dx%d: n %d with strides %d/%d/%d does not fit buffers of %d/%d/%d",
					s.order, s.tileW, s.tileX, n, wstride, xstride, ostride, len(w), len(x), len(out)))
			}
			tile(units(n), ptr(w), wstride, ptr(x), xstride, ptr(out), ostride)
		},
		TileW: s.tileW, TileX: s.tileX,
	}
	if tile == nil { // a Dot only
		k.Tile = nil
	}
	return k
}

// decodeTile is the 4×1 (one activation row) tile of s's order and ISA.
func decodeTile(s spec) (spec, bool) {
	for _, d := range specs {
		if d.order == s.order && d.isa.name == s.isa.name && d.tileW == 4 && d.tileX == 1 && d.tile != nil {
			return d, true
		}
	}
	return spec{}, false
}

// rows is s's cpukern.Rows: the 4×1 decode tile d over each four weight rows
// (four independent FMA chains and four weight streams where a Dot has one),
// or d's body over all of them in one call, the Dot for the last rows; every
// element equals the Dot (TestRowsMatchDot). These kernels do not prefetch
// (pf is not used): their rows are read by the hardware prefetcher.
func (s spec) rows(d spec) cpukern.Rows {
	tile4, body := d.tile, d.body
	return func(n int, w []byte, wstride int, x []byte, out []float32, _ int) {
		rows := len(out)
		if rows == 0 {
			return
		}
		if n < 0 || wstride < 0 {
			panic(fmt.Sprintf("legacy: %s rows: negative length or stride (n %d, stride %d)", s.order, n, wstride))
		}
		if !rowFits(len(w), n, s.qk, s.wb) || !rowFits(len(x), n, s.qk, s.xb) {
			panic(fmt.Sprintf("legacy: %s rows: %d values do not fit %d weight and %d activation bytes", s.order, n, len(w), len(x)))
		}
		rl := need(n, s.qk, s.wb)
		// (rows-1)*wstride+rl <= len(w), without overflow
		if rows > 1 && rl > 0 && (wstride < rl || wstride > len(w) || rows-1 > (len(w)-rl)/wstride) {
			panic(fmt.Sprintf("legacy: %s rows: %d rows of %d bytes %d apart do not fit %d bytes", s.order, rows, rl, wstride, len(w)))
		}
		nb := n
		if s.qk != 1 {
			nb = n / s.qk
		}
		j := 0
		if body != nil && rows >= 4 {
			j = rows / 4 * 4
			body(nb, ptr(w), wstride, ptr(x), &out[0], rows/4, prefetchAhead(wstride))
		}
		for ; j+4 <= rows; j += 4 {
			tile4(nb, ptr(w[j*wstride:]), wstride, ptr(x), 0, &out[j], 1)
		}
		for ; j < rows; j++ {
			out[j] = s.dot(nb, ptr(w[j*wstride:]), ptr(x))
		}
	}
}

// rowsAhead is about how many bytes ahead of a group of four weight rows
// a decode body prefetches (the next groups): far enough that DRAM's
// latency is covered, near enough that the lines still sit in L1 when
// read. (On the 2-core EPYC host, BenchmarkRowsQ8_0 cold: 4 KiB is slower
// on every shape, 8 and 16 KiB within noise of each other.)
const rowsAhead = 8192

// prefetchAhead is the decode bodies' prefetch distance: the whole groups
// of four rows (4·wstride bytes each) nearest rowsAhead, at least one.
func prefetchAhead(wstride int) int {
	g := 4 * wstride
	if g <= 0 || g >= rowsAhead {
		return g
	}
	return max(1, (rowsAhead+g/2)/g) * g
}

// fits reports whether rows rows of rowLen (at most size), stride apart,
// lie in size; rows is at most 4 and stride at most size, so nothing
// overflows.
func fits(size, rows, stride, rowLen int) bool {
	if rowLen == 0 {
		return true
	}
	if rows > 1 && stride > size {
		return false
	}
	return (rows-1)*stride+rowLen <= size
}

// quantizeQ8_0 is quant.QuantizeRowX86(quant.Q8_0, x, dst).
func quantizeQ8_0(x []float32, dst []byte) {
	if len(x)%32 != 0 {
		panic(fmt.Sprintf("legacy: Q8_0 quantizer: %d values is not a multiple of 32", len(x)))
	}
	nb := len(x) / 32
	if len(dst) < nb*34 {
		panic(fmt.Sprintf("legacy: Q8_0 quantizer: %d values need %d bytes, have %d", len(x), nb*34, len(dst)))
	}
	quantQ80AVX2(nb, ptr(x), ptr(dst))
}
