package kernel

import (
	"fmt"
	"math"
)

// A block attention is a CTA's share of causal attention on the tensor
// cores (flash attention): its warps take 16 query rows each of one head
// and walk the key and value caches in blocks of AttnBlock positions that
// the CTA stages through shared memory, keeping each row's scores, running
// maximum, sum and output in registers. Arithmetic: the scores are f32
// sums of products of f16-rounded operands (the query rounded, the caches
// f16 already), scaled; the weights p = exp(s − max) are summed in f32
// and rounded to f16 for their products with the values; the output is
// the weighted values' f32 sum divided by the weights' sum. A target's
// sums run in its own order and its exp may be an approximation, so like
// the tiles' its results match the interpreter's within rounding.

// AttnBlock is the cache positions a block attention takes at a time.
const AttnBlock = 64

// AttnShape is a block attention's warps (16 query rows each) and head
// width (values a row of each operand). With Heads the query rows are
// several heads' rows of one position (the heads of a key-value group in
// a decode step, which then read each cache block once for all of them):
// every row attends the positions below first, none one more than the
// row before. With Split (Heads only) the warps share 16 rows rather than
// take 16 each: warp w walks blocks w, w+Warps, … and the warps' partial
// results fold into the rows' at the end, so a short cache's few blocks
// run side by side, not in turn.
type AttnShape struct {
	Warps, HD int
	Heads     bool
	Split     bool
}

// Threads is the CTA: a warp a 16 rows, or the warps of a split.
func (s AttnShape) Threads() int { return 32 * s.Warps }

// Rows is the query rows a CTA takes.
func (s AttnShape) Rows() int {
	if s.Split {
		return 16
	}
	return 16 * s.Warps
}

// copiers is the threads that copy a cache block: a split's warps copy
// their own blocks.
func (s AttnShape) copiers() int {
	if s.Split {
		return 32
	}
	return s.Threads()
}

// check reports why s is no shape a target renders: 1 to 8 warps, head
// widths a multiple of 16 up to 256, every thread copying whole 16-byte
// chunks of each cache block.
func (s AttnShape) check() error {
	switch {
	case s.Warps < 1 || s.Warps > 8:
		return fmt.Errorf("%d warps (1 to 8)", s.Warps)
	case s.HD < 16 || s.HD > 256 || s.HD%16 != 0:
		return fmt.Errorf("head width %d (a multiple of 16 up to 256)", s.HD)
	case s.copiers()%(s.HD/8) != 0 || AttnBlock*s.HD/8%s.copiers() != 0:
		return fmt.Errorf("%d threads do not share a block's 8-value chunks of %d-wide rows evenly", s.copiers(), s.HD)
	case s.Split && !s.Heads:
		return fmt.Errorf("a split of the blocks over warps needs Heads (every row's positions the same)")
	}
	return nil
}

// BlockAttention sets, for each query row i < min(q.Rows, sh.Rows()),
// y[y.Off + i·y.Stride + d] (d < sh.HD) to the row's attention over the
// cache positions j < first + i (j < first with sh.Heads): query row i is q's (rows past the last
// read the last again), position j's key and value rows start at
// kc.Off + j·kc.Stride and vc.Off + j·vc.Stride; scores are scaled by
// scale. The caches are read in whole blocks of AttnBlock positions up to
// the block holding the last row's last position: the positions past a
// row's are weighted by zero, so they must hold finite values. q is F32
// or U16 (f16 bits), the caches U16, y F32 with an even offset and stride;
// kc's and vc's Rows are not used. It runs on a CTA of sh.Threads() (the
// kernel's cooperative width), its stores ordered before any later access
// of the CTA's other threads.
func (b *Builder) BlockAttention(sh AttnShape, q, kc, vc, y TileOperand, first, scale Expr, quant *AttnQuant) {
	b.blockAttention(sh, q, kc, vc, y, first, scale, quant, nil)
}

// BlockAttentionPart is BlockAttention over the cache positions [lo, hi)
// only (lo a multiple of AttnBlock; row i's still end at first + i), its
// output a partial that flash-decoding folds with the others of the row
// (AttentionMerge): y[y.Off + i·y.Stride + d] = Σ_j p_j·v_j[d] unnormalized,
// then at + sh.HD the scores' maximum m (natural units) and at + sh.HD + 1
// the weights' sum l, p_j = exp(s_j − m) (the values' weights rounded to
// f16 as BlockAttention's). A row with no positions in the range has m =
// −Inf, l = 0 and a zero output. Only blocks holding positions of the range
// are read.
func (b *Builder) BlockAttentionPart(sh AttnShape, q, kc, vc, y TileOperand, first, lo, hi, scale Expr) {
	b.blockAttention(sh, q, kc, vc, y, first, scale, nil, []Expr{lo, hi})
}

func (b *Builder) blockAttention(sh AttnShape, q, kc, vc, y TileOperand, first, scale Expr, quant *AttnQuant, span []Expr) {
	args := []Expr{q.Off, q.Stride, q.Rows, kc.Off, kc.Stride, vc.Off, vc.Stride, y.Off, y.Stride, first}
	if err := sh.check(); err != nil {
		b.fail("block attention: %v", err)
		return
	}
	if span != nil && sh.Split {
		b.fail("block attention: a partial's range over split warps")
		return
	}
	if span != nil && (!b.check("block attention range", span...) || !allInt(span)) {
		b.fail("block attention: the range's bounds must be Int")
		return
	}
	var extra []*Buf
	var qargs []Expr
	if quant != nil {
		extra = []*Buf{quant.Quants.Buf, quant.Scales.Buf}
		qargs = []Expr{quant.Quants.Off, quant.Quants.Stride, quant.Scales.Off, quant.Scales.Stride}
		switch {
		case sh.HD%32 != 0:
			b.fail("block attention: Q8_0 output of head width %d (a multiple of 32)", sh.HD)
			return
		case quant.Quants.Buf.Elem != U8 || quant.Scales.Buf.Elem != F32:
			b.fail("block attention: Q8_0 output into %s and %s (want U8, F32)", quant.Quants.Buf.Elem, quant.Scales.Buf.Elem)
			return
		case !b.check("block attention quants", qargs...) || !allInt(qargs):
			b.fail("block attention: Q8_0 offsets and strides must be Int")
			return
		}
	}
	switch {
	case !b.check("block attention", append(args, scale)...):
	case b.par != 1:
		b.fail("block attention: outside the kernel's ParallelFor")
	case q.Step != nil || kc.Step != nil || vc.Step != nil || y.Step != nil:
		b.fail("block attention: a Step (operands and output are contiguous rows)")
	case !tileElem(q.Buf) || kc.Buf.Elem != U16 || vc.Buf.Elem != U16 || y.Buf.Elem != F32:
		b.fail("block attention: q, caches and output of %s, %s, %s, %s (want F32 or U16, U16, U16, F32)", q.Buf.Elem, kc.Buf.Elem, vc.Buf.Elem, y.Buf.Elem)
	case !allInt(args) || scale.Kind != F32:
		b.fail("block attention: offsets, strides, rows and first must be Int, scale F32")
	default:
		b.emit(&Stmt{Op: SBlockAttention, Attn: &sh, Part: span != nil, Buf: q.Buf, Buf2: kc.Buf, Buf3: vc.Buf, Out: y.Buf, Extra: extra,
			Args: append(append(append(args, scale), qargs...), span...)})
	}
}

// AttnQuant is a block attention's second output: each row's values
// quantized to Q8_0 blocks of 32 as QuantizeQ8_0 quantizes the stored f32
// values (x86 rounding: d = f16(amax/127), q = round_even(v·127/amax)),
// row i's quants from Quants.Off + i·Quants.Stride (U8, an even offset and
// stride), its scales from Scales.Off + i·Scales.Stride (F32), a block's
// scale at its first value's index / 32. The operands' Rows are not used.
type AttnQuant struct{ Quants, Scales TileOperand }

// blockAttention interprets a block attention.
func (m *machine) blockAttention(s *Stmt) {
	ev := make([]int, 0, len(s.Args))
	for i, a := range s.Args {
		if i != 10 { // the scale
			ev = append(ev, int(m.eval(a).i))
		}
	}
	scale := float32(m.eval(s.Args[10]).f)
	sh := s.Attn
	qOff, qStride, qRows, kOff, kStride, vOff, vStride, yOff, yStride, first := ev[0], ev[1], ev[2], ev[3], ev[4], ev[5], ev[6], ev[7], ev[8], ev[9]
	rows := min(qRows, sh.Rows())
	if qRows < 1 || first < 1 {
		fail("block attention: %d query rows, %d positions for the first", qRows, first)
	}
	if yOff%2 != 0 || yStride%2 != 0 {
		fail("block attention: output offset %d and stride %d must be even", yOff, yStride)
	}
	step := 1 // positions a row attends past the row before
	if sh.Heads {
		step = 0
	}
	// the whole blocks a target reads, bounds-checked as it would be
	ends := (first + step*(rows-1) + AttnBlock - 1) / AttnBlock * AttnBlock
	lo, hi := 0, ends
	if s.Part {
		lo, hi = ev[10], ev[11]
		if lo < 0 || lo%AttnBlock != 0 {
			fail("block attention: range start %d is not a multiple of %d", lo, AttnBlock)
		}
		ends = min(ends, (hi+AttnBlock-1)/AttnBlock*AttnBlock)
	}
	f16 := func(b *Buf, i int) float32 {
		v := m.load(b, b.Elem, i)
		if b.Elem == U16 {
			return F16ToF32(uint16(v.i))
		}
		return F16ToF32(F32ToF16(float32(v.f)))
	}
	keys := make([]float32, max(ends, 0)*sh.HD)
	vals := make([]float32, max(ends, 0)*sh.HD)
	for j := lo; j < ends; j++ {
		for d := range sh.HD {
			keys[j*sh.HD+d] = f16(s.Buf2, kOff+j*kStride+d)
			vals[j*sh.HD+d] = f16(s.Buf3, vOff+j*vStride+d)
		}
	}
	sc := make([]float32, ends)
	out := make([]float32, sh.HD)
	qrow := make([]float32, sh.HD)
	for i := range rows {
		qi := qOff + min(i, qRows-1)*qStride
		for d := range qrow {
			qrow[d] = f16(s.Buf, qi+d)
		}
		n := min(first+step*i, hi)
		mx := float32(math.Inf(-1))
		for j := lo; j < n; j++ {
			var sum float32
			for d, qv := range qrow {
				sum += float32(qv * keys[j*sh.HD+d])
			}
			sc[j] = float32(sum * scale)
			mx = max(mx, sc[j])
		}
		var l float32
		clear(out)
		for j := lo; j < n; j++ {
			p := float32(math.Exp(float64(sc[j] - mx)))
			l += p
			ph := F16ToF32(F32ToF16(p))
			for d := range sh.HD {
				out[d] += float32(ph * vals[j*sh.HD+d])
			}
		}
		if s.Part {
			for d := range sh.HD {
				m.store(s.Out, yOff+i*yStride+d, val{f: float64(out[d])})
			}
			m.store(s.Out, yOff+i*yStride+sh.HD, val{f: float64(mx)})
			m.store(s.Out, yOff+i*yStride+sh.HD+1, val{f: float64(l)})
			continue
		}
		for d := range sh.HD {
			out[d] /= l
			m.store(s.Out, yOff+i*yStride+d, val{f: float64(out[d])})
		}
		if s.Extra != nil {
			qOff, qStride, dOff, dStride := ev[10], ev[11], ev[12], ev[13]
			for b0 := 0; b0 < sh.HD; b0 += 32 {
				d, q := quantQ8_0Block(out[b0 : b0+32])
				m.store(s.Extra[1], dOff+i*dStride+b0/32, val{f: float64(d)})
				for j, v := range q {
					m.store(s.Extra[0], qOff+i*qStride+b0+j, val{i: int64(uint8(v))})
				}
			}
		}
	}
}

// quantQ8_0Block quantizes 32 values as kernels/ops' QuantizeQ8_0 does (x86
// rounding): d = f16(amax/127), q = round_even(v·127/amax), all zero for
// a zero block.
func quantQ8_0Block(v []float32) (float32, [32]int8) {
	var amax float32
	for _, x := range v {
		amax = max(amax, x, -x)
	}
	d := F16ToF32(F32ToF16(amax / 127))
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	var q [32]int8
	for j, x := range v {
		p := float32(x * id)
		q[j] = int8(float32(p+12582912) - 12582912)
	}
	return d, q
}
