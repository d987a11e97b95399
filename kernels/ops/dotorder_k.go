package ops

import (
	"fmt"

	k "github.com/jitllm/jitllm/dsl/kernel"
)

// ggml's AVX2 orders of the k-quant dot products (arch/x86/quants.c,
// ggml_vec_dot_q{4,6}_K_q8_K under __AVX2__, which AVX512 builds also run).
// Per super-block they keep one int32 lane per four consecutive bytes of
// each 32-value chunk (_mm256_maddubs_epi16 then _mm256_madd_epi16 by the
// sub-block scale), so lane t sums the values v with (v mod 32)/4 == t, not
// v mod 8 as the generic kernels' aux32[8] does. The integer lanes are
// exact, so only which values meet in a lane matters; each lane then takes
// acc[t] = fma(d, float(lane), acc[t]) across blocks, and hsum_float_8 joins
// them. Q4_K's mins go to four f32 lanes of their own (_mm_madd_epi16 of
// the mins with pairwise bsums, fma by -dmin), reduced 0+2, 1+3, then
// together, and added after hsum_float_8.
//
// The lane split changes which values meet in a float lane, which is the
// algorithm's shape rather than an accumulation order, so these are kernels
// of their own over the same decode; their Orders (lanes, fusion, tree) are
// schedules as in dotorder.go.

// avx2K is the AVX2 order of the k-quant sums: eight fused lanes over the
// lane loop t, hsum_float_8 at the end.
var avx2K = k.Schedule{"sum": {Order: k.Order{Lanes: 8, LaneLoop: "t", LaneFused: true, Tree: k.TreeHalving}}}

// kDotAVX2 is the shared shape: blk folds each super-block into the lanes of
// sum and, for the nmins types with mins, into the fused mins accumulators.
func kDotAVX2(name string, bytes, nmins int, doc string, blk func(b *k.Builder, wb, xb *k.Buf, sum *k.Var, mins []*k.Var)) *k.Kernel {
	b := k.New("Dot" + name + "AVX2")
	b.Doc(doc)
	n := b.Scalar("n", k.Int)
	w, x := b.Buffer("w", k.U8), b.Buffer("x", k.U8)
	sum := b.Acc("sum", k.OpAdd, k.F(0))
	var mins []*k.Var
	for u := 0; u < nmins; u++ {
		mins = append(mins, b.Acc(fmt.Sprintf("m%d", u), k.OpAdd, k.F(0)))
	}
	b.For("blk", 0, n.Div(256), func(i k.Expr) {
		wb := b.View("wb", w, i.Mul(bytes), bytes)
		xb := b.View("xb", x, i.Mul(PQ8_K.Bytes), PQ8_K.Bytes)
		blk(b, wb, xb, sum, mins)
	})
	r := sum.Get()
	if len(mins) == 1 { // hsum_float_8(acc) + summs
		r = r.Add(mins[0].Get())
	} else if mins != nil {
		// _mm_movehl_ps then _mm_movehdup_ps: (m0+m2) + (m1+m3)
		r = r.Add(mins[0].Get().Add(mins[2].Get()).Add(mins[1].Get().Add(mins[3].Get())))
	}
	b.Return(r)
	for name, ls := range avx2K {
		b.Schedule(name, ls)
	}
	for _, m := range mins {
		b.Schedule(m.Name, k.LoopSchedule{Order: k.Order{Fused: true}})
	}
	return b.MustBuild()
}

func dotQ4_KAVX2() *k.Kernel {
	return kDotAVX2("Q4_K", Q4_K.Bytes, 4, "is DotQ4_K in ggml's AVX2 order.", func(b *k.Builder, wb, xb *k.Buf, sum *k.Var, mins []*k.Var) {
		yd := b.Let("yd", xb.F32(0))
		d := b.Let("d", yd.Mul(wb.F16(0)))
		dmin := b.Let("dmin", yd.Neg().Mul(wb.F16(2))) // ggml: -y.d * dmin
		var sc, mn [8]k.Expr
		for j := range sc {
			s, m := scaleMinK4(wb, 4, j)
			sc[j], mn[j] = b.Let("sc", s.Cvt(k.I32)), b.Let("mn", m.Cvt(k.I32))
		}
		b.For("t", 0, 8, func(t k.Expr) {
			aux := b.Acc("aux", k.OpAdd, k.Const(k.I32, 0))
			for j := 0; j < 4; j++ { // 64 values: low nibbles of qs[32j:], then high
				for h := 0; h < 2; h++ {
					for c := 0; c < 4; c++ {
						q := wb.U8(t.Mul(4).Add(16 + 32*j + c)).Shr(4 * h).And(0xf).Cvt(k.I32)
						b.Fold(aux, sc[2*j+h].Mul(xq(xb, PQ8_K, q, t.Mul(4).Add(64*j+32*h+c))))
					}
				}
			}
			b.Fold(sum, d.Mul(aux.Get().Cvt(k.F32)))
		})
		// lane u: mins 2u, 2u+1 times the pairwise bsums (_mm_hadd_epi16)
		bs := func(g int) k.Expr { return i16(xb.U16(260 + 2*g)) }
		for u, m := range mins {
			p := mn[2*u].Mul(bs(4 * u).Add(bs(4*u + 1))).Add(mn[2*u+1].Mul(bs(4*u + 2).Add(bs(4*u + 3))))
			b.Fold(m, dmin.Mul(p.Cvt(k.F32)))
		}
	})
}

func dotQ6_KAVX2() *k.Kernel {
	return kDotAVX2("Q6_K", Q6_K.Bytes, 0, "is DotQ6_K in ggml's AVX2 order.", func(b *k.Builder, wb, xb *k.Buf, sum *k.Var, _ []*k.Var) {
		d := b.Let("d", xb.F32(0).Mul(wb.F16(208)))
		b.For("t", 0, 8, func(t k.Expr) {
			aux := b.Acc("aux", k.OpAdd, k.Const(k.I32, 0))
			for half := 0; half < 2; half++ {
				for tq := 0; tq < 4; tq++ { // value 128half + 32tq + 4t + c
					for c := 0; c < 4; c++ {
						l := t.Mul(4).Add(c)
						ql := wb.U8(l.Add(64*half + 32*(tq%2))).Shr(4 * (tq / 2)).And(0xf)
						qh := wb.U8(l.Add(128 + 32*half)).Shr(2 * tq).And(3).Shl(4)
						q := ql.Or(qh).Cvt(k.I32).Sub(32)
						sc := wb.I8(t.Div(4).Add(192 + 8*half + 2*tq)).Cvt(k.I32) // scale of value/16
						b.Fold(aux, sc.Mul(xq(xb, PQ8_K, q, l.Add(128*half+32*tq))))
					}
				}
			}
			b.Fold(sum, d.Mul(aux.Get().Cvt(k.F32)))
		})
	})
}

// Q5_K (176 bytes): d f16, dmin f16, scales[12] as Q4_K's, qh[32] (bit
// 2j of qh[l] is value 64j+l's fifth bit, bit 2j+1 value 64j+32+l's),
// qs[128] as Q4_K's. ggml's dequantize_row_q5_K. Not yet in Blocks(): only
// the dot kernels use it so far.
var Q5_K = BlockDecode{Name: "Q5_K", QK: 256, Bytes: 176, F16: []int{0, 2}, Sched: kLanes,
	Decode: func(b *k.Builder, blk *k.Buf, emit Emit) {
		d, dmin := b.Let("d", blk.F16(0)), b.Let("dmin", blk.F16(2))
		for j := 0; j < 4; j++ {
			s1, m1 := scaleMinK4(blk, 4, 2*j)
			s2, m2 := scaleMinK4(blk, 4, 2*j+1)
			d1, mm1 := b.Let("d1", d.Mul(s1.Cvt(k.F32))), b.Let("m1", dmin.Mul(m1.Cvt(k.F32)))
			d2, mm2 := b.Let("d2", d.Mul(s2.Cvt(k.F32))), b.Let("m2", dmin.Mul(m2.Cvt(k.F32)))
			b.For("l", 0, 32, func(l k.Expr) {
				q, h := b.Let("q", blk.U8(l.Add(48+32*j))), b.Let("h", blk.U8(l.Add(16)))
				emit(l.Add(64*j), d1.Mul(q5k(q, h, j, 0).Cvt(k.F32)).Sub(mm1))
				emit(l.Add(64*j+32), d2.Mul(q5k(q, h, j, 1).Cvt(k.F32)).Sub(mm2))
			})
		}
	}}

// q5k is a Q5_K quant (0..31) from its qs byte q and qh byte h: nibble hi of
// q, bit 2j+hi of h.
func q5k(q, h k.Expr, j, hi int) k.Expr {
	return q.Shr(4 * hi).And(0xf).Or(h.Shr(2*j + hi).And(1).Shl(4))
}

// dotQ5_K is ggml_vec_dot_q5_K_q8_K_generic: Q4_K's shape with 5-bit quants.
func dotQ5_K() *k.Kernel {
	return kDot("Q5_K", Q5_K.Bytes, func(b *k.Builder, wb, xb *k.Buf, sum *k.Var) {
		yd := b.Let("yd", xb.F32(0))
		d, dmin := b.Let("d", wb.F16(0).Mul(yd)), b.Let("dmin", wb.F16(2).Mul(yd))
		var sc, mn [8]k.Expr
		for j := range sc {
			s, m := scaleMinK4(wb, 4, j)
			sc[j], mn[j] = b.Let("sc", s.Cvt(k.I32)), b.Let("mn", m.Cvt(k.I32))
		}
		b.For("l", 0, 8, func(l k.Expr) {
			aux := b.Acc("aux", k.OpAdd, k.Const(k.I32, 0))
			for c := 0; c < 32; c++ { // value 8c+l: sub-block c/4
				sb, p := c/4, l.Add(8*(c%4))
				q := q5k(wb.U8(p.Add(48+32*(sb/2))), wb.U8(p.Add(16)), sb/2, sb%2).Cvt(k.I32)
				b.Fold(aux, sc[sb].Mul(xq(xb, PQ8_K, q, l.Add(8*c))))
			}
			b.Fold(sum, d.Mul(aux.Get().Cvt(k.F32)))
		})
		mins := b.Acc("mins", k.OpAdd, k.Const(k.I32, 0))
		for j := 0; j < 16; j++ {
			b.Fold(mins, i16(xb.U16(260+2*j)).Mul(mn[j/2]))
		}
		b.Fold(sum, dmin.Mul(mins.Get().Cvt(k.F32)).Neg())
	})
}

// dotQ5_KAVX2 is ggml_vec_dot_q5_K_q8_K's AVX2 path: Q4_K's lanes over the
// 5-bit quants, but the mins summed to one integer per block
// (_mm_hadd_epi32 twice) and accumulated in a scalar, summs += dmin·sum,
// which GCC contracts to an FMA (as it does sumf += x*y in dotorder.go).
func dotQ5_KAVX2() *k.Kernel {
	return kDotAVX2("Q5_K", Q5_K.Bytes, 1, "is DotQ5_K in ggml's AVX2 order.", func(b *k.Builder, wb, xb *k.Buf, sum *k.Var, mins []*k.Var) {
		yd := b.Let("yd", xb.F32(0))
		d := b.Let("d", yd.Mul(wb.F16(0)))
		dmin := b.Let("dmin", yd.Neg().Mul(wb.F16(2)))
		var sc, mn [8]k.Expr
		for j := range sc {
			s, m := scaleMinK4(wb, 4, j)
			sc[j], mn[j] = b.Let("sc", s.Cvt(k.I32)), b.Let("mn", m.Cvt(k.I32))
		}
		b.For("t", 0, 8, func(t k.Expr) {
			aux := b.Acc("aux", k.OpAdd, k.Const(k.I32, 0))
			for j := 0; j < 4; j++ {
				for h := 0; h < 2; h++ {
					for c := 0; c < 4; c++ {
						p := t.Mul(4).Add(c)
						q := q5k(wb.U8(p.Add(48+32*j)), wb.U8(p.Add(16)), j, h).Cvt(k.I32)
						b.Fold(aux, sc[2*j+h].Mul(xq(xb, PQ8_K, q, p.Add(64*j+32*h))))
					}
				}
			}
			b.Fold(sum, d.Mul(aux.Get().Cvt(k.F32)))
		})
		p := k.Expr(k.Const(k.I32, 0))
		for g := 0; g < 16; g++ {
			p = p.Add(mn[g/2].Mul(i16(xb.U16(260 + 2*g))))
		}
		b.Fold(mins[0], dmin.Mul(b.Let("msum", p).Cvt(k.F32)))
	})
}

// dotQ4_KRepack8x8 is one output of ggml's repacked Q4_K kernels on x86
// (ggml_gemv_q4_K_8x8_q8_K, arch/x86/repack.cpp), which llama.cpp runs for
// every Q4_K matrix with a multiple of 8 rows on an AVX2 machine: the
// block's whole integer sum (int16 partials that cannot overflow, then
// _mm256_madd_epi16 by the scales) with one FMA by d·y.d, the mins' whole
// sum with another by dmin·y.d, and the two accumulators subtracted at the
// end.
func dotQ4_KRepack8x8() *k.Kernel {
	b := k.New("DotQ4_KRepack8x8")
	b.Doc("is DotQ4_K in the order of ggml's repacked q4_K_8x8 kernels.")
	n := b.Scalar("n", k.Int)
	w, x := b.Buffer("w", k.U8), b.Buffer("x", k.U8)
	sum := b.Acc("sum", k.OpAdd, k.F(0))
	msum := b.Acc("msum", k.OpAdd, k.F(0))
	b.For("blk", 0, n.Div(256), func(i k.Expr) {
		wb := b.View("wb", w, i.Mul(Q4_K.Bytes), Q4_K.Bytes)
		xb := b.View("xb", x, i.Mul(PQ8_K.Bytes), PQ8_K.Bytes)
		yd := b.Let("yd", xb.F32(0))
		d, dmin := b.Let("d", wb.F16(0).Mul(yd)), b.Let("dmin", wb.F16(2).Mul(yd))
		var sc, mn [8]k.Expr
		for j := range sc {
			s, m := scaleMinK4(wb, 4, j)
			sc[j], mn[j] = b.Let("sc", s.Cvt(k.I32)), b.Let("mn", m.Cvt(k.I32))
		}
		s := b.Acc("s", k.OpAdd, k.Const(k.I32, 0))
		for j := 0; j < 8; j++ { // sub-block j: nibble j%2 of qs[32(j/2):]
			b.For("l", 0, 32, func(l k.Expr) {
				q := wb.U8(l.Add(16 + 32*(j/2))).Shr(4 * (j % 2)).And(0xf).Cvt(k.I32)
				b.Fold(s, sc[j].Mul(xq(xb, PQ8_K, q, l.Add(32*j))))
			})
		}
		b.Fold(sum, d.Mul(s.Get().Cvt(k.F32)))
		m := k.Expr(k.Const(k.I32, 0))
		for g := 0; g < 16; g++ {
			m = m.Add(mn[g/2].Mul(i16(xb.U16(260 + 2*g))))
		}
		b.Fold(msum, dmin.Mul(b.Let("msumi", m).Cvt(k.F32)))
	})
	b.Return(sum.Get().Sub(msum.Get()))
	b.Schedule("l", k.LoopSchedule{Unroll: 32})
	b.Schedule("sum", k.LoopSchedule{Order: k.Order{Fused: true}})
	b.Schedule("msum", k.LoopSchedule{Order: k.Order{Fused: true}})
	return b.MustBuild()
}

// kDotsAVX2 are the k-quant dots in ggml's x86 orders, and Q5_K's generic
// one (its decode is new with them).
func kDotsAVX2() []Dot {
	return []Dot{
		{dotQ5_K(), "Q5_K", "Q8_K", 256},
		{dotQ4_KAVX2(), "Q4_K", "Q8_K", 256},
		{dotQ4_KRepack8x8(), "Q4_K", "Q8_K", 256},
		{dotQ5_KAVX2(), "Q5_K", "Q8_K", 256},
		{dotQ6_KAVX2(), "Q6_K", "Q8_K", 256},
	}
}
