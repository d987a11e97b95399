//go:build amd64

package attn

import (
	"fmt"
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/jitllm/jitllm/kernels/cpukern"
)

type (
	asmDot func(nc int, q *float32, k *uint16, kstride int, rows int, out *float32)
	asmAcc func(nv int, acc *float32, v *uint16, vstride int, rows int, vs *float32, ms *float32)
)

// build is one instruction-set build of the two loops.
type build struct {
	isa   string
	rank  int
	lanes int // float32 per register: Accum's length granule
	has   func() bool
	dot   asmDot
	acc   asmAcc
}

var builds = []build{
	{"avx512", 20, 16, func() bool {
		return cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C, cpuid.AVX512F)
	}, dotAVX512, accAVX512},
	{"avx2", 10, 8, func() bool {
		return cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
	}, dotAVX2, accAVX2},
}

func init() {
	for _, b := range builds {
		if b.has() {
			cpukern.RegisterAttention(b.kernel())
		}
	}
}

// rowsFit reports whether rows rows of n values, stride apart, fit in size
// values, without overflowing.
func rowsFit(size, rows, stride, n int) bool {
	if rows == 0 {
		return true
	}
	if n > size || stride < 0 {
		return false
	}
	return stride == 0 || (rows-1) <= (size-n)/stride
}

func (b build) kernel() cpukern.Attention {
	dot, acc, lanes := b.dot, b.acc, b.lanes
	return cpukern.Attention{
		ISA: b.isa, Rank: b.rank,
		Dot: func(q []float32, k []uint16, stride int, out []float32) {
			if len(q)%64 != 0 || !rowsFit(len(k), len(out), stride, len(q)) {
				panic(fmt.Sprintf("attn: %s dot: %d query values (want a multiple of 64) and %d rows %d apart do not fit %d key values",
					b.isa, len(q), len(out), stride, len(k)))
			}
			if len(out) == 0 {
				return
			}
			dot(len(q)/64, unsafe.SliceData(q), unsafe.SliceData(k), stride, len(out), unsafe.SliceData(out))
		},
		Accum: func(a []float32, v []uint16, stride int, vs, ms []float32) {
			if len(a)%8 != 0 || len(ms) != len(vs) || !rowsFit(len(v), len(vs), stride, len(a)) {
				panic(fmt.Sprintf("attn: %s accum: %d accumulators (want a multiple of 8), %d/%d weights and %d rows %d apart do not fit %d values",
					b.isa, len(a), len(vs), len(ms), len(vs), stride, len(v)))
			}
			if len(vs) == 0 || len(a) == 0 {
				return
			}
			if len(a)%lanes != 0 { // a zmm build on a length of ymm granule: split off the last 8
				if lanes != 16 {
					panic("attn: unreachable")
				}
				n := len(a) - 8
				if n > 0 {
					acc(n/16, unsafe.SliceData(a), unsafe.SliceData(v), stride, len(vs), unsafe.SliceData(vs), unsafe.SliceData(ms))
				}
				accAVX2(1, &a[n], &v[n], stride, len(vs), unsafe.SliceData(vs), unsafe.SliceData(ms))
				return
			}
			acc(len(a)/lanes, unsafe.SliceData(a), unsafe.SliceData(v), stride, len(vs), unsafe.SliceData(vs), unsafe.SliceData(ms))
		},
	}
}

// The q8_0 cache's loops (gen/q8.go).
type (
	asmDotQ8 func(nb int, qq *byte, qd *float32, kq *byte, ks *uint16, stride int, rows int, out *float32)
	asmAccQ8 func(nv int, acc *float32, vq *byte, vd *uint16, stride int, rows int, w *float32, ms *float32)
)

// buildQ8 is one instruction-set build of the q8_0 loops.
type buildQ8 struct {
	isa   string
	rank  int
	lanes int // float32 per register
	has   func() bool
	dot   asmDotQ8
	acc   asmAccQ8
}

// q8MaxVals is the longest query the dots take (gen's q8MaxBlocks blocks).
const q8MaxVals = 32 * 32

var buildsQ8 = []buildQ8{
	{"avx512vnni", 20, 16, func() bool {
		return cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C,
			cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512VNNI)
	}, dotQ8AVX512, accQ8AVX512},
	{"avx2", 10, 8, func() bool {
		return cpuid.CPU.Supports(cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C)
	}, dotQ8AVX2, accQ8AVX2},
}

func init() {
	for _, b := range buildsQ8 {
		if b.has() {
			cpukern.RegisterAttentionQ8(b.kernel())
		}
	}
}

func (b buildQ8) kernel() cpukern.AttentionQ8 {
	dot, acc, lanes := b.dot, b.acc, b.lanes
	return cpukern.AttentionQ8{
		ISA: b.isa, Rank: b.rank,
		Dot: func(qq []byte, qd []float32, kq []byte, ks []uint16, stride int, out []float32) {
			n := len(qq)
			// the gather's indices are int32: 15·(stride/32)·2 must fit
			if n%32 != 0 || n < 64 || n > q8MaxVals || len(qd) < n/32 || stride%32 != 0 || stride > 1<<30 ||
				!rowsFit(len(kq), len(out), stride, n) || !rowsFit(len(ks), len(out), stride/32, n/32) {
				panic(fmt.Sprintf("attn: %s q8_0 dot: %d query quants (want a multiple of 32 from 64 to %d), %d scales, and %d rows %d apart do not fit %d key quants and %d scales",
					b.isa, n, q8MaxVals, len(qd), len(out), stride, len(kq), len(ks)))
			}
			if len(out) == 0 {
				return
			}
			dot(n/32, unsafe.SliceData(qq), unsafe.SliceData(qd), unsafe.SliceData(kq), unsafe.SliceData(ks), stride, len(out), unsafe.SliceData(out))
		},
		Accum: func(a []float32, vq []byte, vd []uint16, stride int, w, ms []float32) {
			n := len(a)
			if n%32 != 0 || len(ms) != len(w) || stride%32 != 0 ||
				!rowsFit(len(vq), len(w), stride, n) || !rowsFit(len(vd), len(w), stride/32, n/32) {
				panic(fmt.Sprintf("attn: %s q8_0 accum: %d accumulators (want a multiple of 32), %d/%d weights and %d rows %d apart do not fit %d quants and %d scales",
					b.isa, n, len(w), len(ms), len(w), stride, len(vq), len(vd)))
			}
			if len(w) == 0 || n == 0 {
				return
			}
			acc(n/lanes, unsafe.SliceData(a), unsafe.SliceData(vq), unsafe.SliceData(vd), stride, len(w), unsafe.SliceData(w), unsafe.SliceData(ms))
		},
	}
}
