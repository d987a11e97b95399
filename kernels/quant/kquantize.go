package quant

import "math"

// Reference k-quant quantizers (ggml-quants.c quantize_row_q{2..6}_K_ref),
// what llama-quantize uses without an importance matrix. The arithmetic is
// float32, step by step and in ggml's order, so the bytes match.

const groupMaxEps = 1e-15

// absf clears the sign bit, as fabsf does.
func absf(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

func sqrtf(x float32) float32 { return float32(math.Sqrt(float64(x))) }

func clampi(v, lo, hi int32) int32 { return max(lo, min(hi, v)) }

// makeQKX2 is make_qkx2_quants: an asymmetric (scale, min) fit of x to
// 0..nmax levels, refined over nstep+1 trial scales. It returns the scale and
// the (positive) min.
func makeQKX2(nmax int32, x, weights []float32, L, laux []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	n := len(x)
	mn, mx := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < mn {
			mn = x[i]
		}
		if x[i] > mx {
			mx = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if mn > 0 {
		mn = 0
	}
	if mx == mn {
		for i := range L[:n] {
			L[i] = 0
		}
		return 0, -mn
	}
	iscale := float32(nmax) / (mx - mn)
	scale = 1 / iscale
	var bestErr float32
	for i := 0; i < n; i++ {
		l := clampi(nearestInt(float32(iscale*(x[i]-mn))), 0, nmax)
		L[i] = uint8(l)
		diff := float32(float32(scale*float32(l))+mn) - x[i]
		if useMad {
			diff = absf(diff)
		} else {
			diff = diff * diff
		}
		bestErr += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -mn
	}
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + float32(nmax)) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := clampi(nearestInt(float32(iscale*(x[i]-mn))), 0, nmax)
			laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var cur float32
			for i := 0; i < n; i++ {
				diff := float32(float32(thisScale*float32(laux[i]))+thisMin) - x[i]
				if useMad {
					diff = absf(diff)
				} else {
					diff = diff * diff
				}
				cur += float32(weights[i] * diff)
			}
			if cur < bestErr {
				copy(L[:n], laux[:n])
				bestErr = cur
				scale, mn = thisScale, thisMin
			}
		}
	}
	return scale, -mn
}

// makeQX1 is make_qx_quants with rmse_type 1 and no importance weights
// (w = x^2): a symmetric fit to -nmax..nmax-1, stored offset by nmax.
func makeQX1(nmax int32, x []float32, L []int8) float32 {
	var mx, amax float32
	for _, v := range x {
		if ax := absf(v); ax > amax {
			amax, mx = ax, v
		}
	}
	if amax < groupMaxEps {
		for i := range x {
			L[i] = 0
		}
		return 0
	}
	iscale := float32(-nmax) / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampi(nearestInt(float32(iscale*v)), -nmax, nmax-1)
		L[i] = int8(l + nmax)
		w := v * v
		sumlx += float32(float32(w*v) * float32(l))
		suml2 += float32(float32(w*float32(l)) * float32(l))
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := int32(-9); is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / mx
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := clampi(nearestInt(float32(iscale*v)), -nmax, nmax-1)
			w := v * v
			sumlx += float32(float32(w*v) * float32(l))
			suml2 += float32(float32(w*float32(l)) * float32(l))
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i, v := range x {
				L[i] = int8(nmax + clampi(nearestInt(float32(iscale*v)), -nmax, nmax-1))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3 is make_q3_quants with do_rmse: a symmetric fit refined by moving
// single levels while the weighted error drops.
func makeQ3(nmax int32, x []float32, L []int8) float32 {
	var mx, amax float32
	for _, v := range x {
		if ax := absf(v); ax > amax {
			amax, mx = ax, v
		}
	}
	if amax < groupMaxEps {
		for i := range x {
			L[i] = 0
		}
		return 0
	}
	iscale := float32(-nmax) / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampi(nearestInt(float32(iscale*v)), -nmax, nmax-1)
		L[i] = int8(l)
		w := v * v
		sumlx += float32(float32(w*v) * float32(l))
		suml2 += float32(float32(w*float32(l)) * float32(l))
	}
	for itry := 0; itry < 5; itry++ {
		changed := 0
		for i, v := range x {
			w := v * v
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			if slx > 0 {
				sl2 := suml2 - float32(float32(w*li)*li)
				nl := clampi(nearestInt(float32(v*sl2)/slx), -nmax, nmax-1)
				if nl != int32(L[i]) {
					fn := float32(nl)
					slx += float32(float32(w*v) * fn)
					sl2 += float32(float32(w*fn) * fn)
					if sl2 > 0 && float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
						L[i] = int8(nl)
						sumlx, suml2 = slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range x {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// pack2bit stores 2-bit levels the Q2_K/Q3_K way: byte 32h+l of qs holds
// values 128h+l, +32, +64, +96 in bit pairs 0, 2, 4, 6.
func pack2bit(L []uint8, qs []byte) {
	for h := 0; h < 2; h++ {
		for l := 0; l < 32; l++ {
			j := 128*h + l
			qs[32*h+l] = L[j] | L[j+32]<<2 | L[j+64]<<4 | L[j+96]<<6
		}
	}
}

func quantQ2_K(src []float32, dst []byte) {
	var L [QK_K]uint8
	var laux [16]uint8
	var weights [16]float32
	var mins, scales [16]float32
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*q2kBytes : (i+1)*q2kBytes : (i+1)*q2kBytes]
		var maxScale, maxMin float32
		for j := 0; j < 16; j++ {
			xs := x[16*j : 16*j+16]
			for l := range weights {
				weights[l] = absf(xs[l])
			}
			scales[j], mins[j] = makeQKX2(3, xs, weights[:], L[16*j:16*j+16], laux[:], -0.5, 0.1, 15, true)
			maxScale = max(maxScale, scales[j])
			maxMin = max(maxMin, mins[j])
		}
		sc := b[0:16:16]
		if maxScale > 0 {
			iscale := 15 / maxScale
			for j := range sc {
				sc[j] = uint8(nearestInt(float32(iscale * scales[j])))
			}
			put16(b, 80, F32ToF16(maxScale/15))
		} else {
			clear(sc)
			put16(b, 80, 0)
		}
		if maxMin > 0 {
			iscale := 15 / maxMin
			for j := range sc {
				sc[j] |= uint8(nearestInt(float32(iscale*mins[j]))) << 4
			}
			put16(b, 82, F32ToF16(maxMin/15))
		} else {
			put16(b, 82, 0)
		}
		dall, dmin := fp16(b, 80), fp16(b, 82)
		for j := 0; j < 16; j++ {
			d := dall * float32(sc[j]&0xf)
			if d == 0 {
				continue
			}
			dm := float32(dmin * float32(sc[j]>>4))
			for ii := 0; ii < 16; ii++ {
				L[16*j+ii] = uint8(clampi(nearestInt((x[16*j+ii]+dm)/d), 0, 3))
			}
		}
		pack2bit(L[:], b[16:80])
	}
}

func quantQ3_K(src []float32, dst []byte) {
	var L [QK_K]int8
	var scales [16]float32
	var Lu [QK_K]uint8
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*q3kBytes : (i+1)*q3kBytes : (i+1)*q3kBytes]
		var maxScale, amax float32
		for j := 0; j < 16; j++ {
			scales[j] = makeQ3(4, x[16*j:16*j+16], L[16*j:16*j+16])
			if s := absf(scales[j]); s > amax {
				amax, maxScale = s, scales[j]
			}
		}
		s := b[96:108:108]
		clear(s)
		if maxScale != 0 {
			iscale := -32 / maxScale
			for j := 0; j < 16; j++ {
				l := int32(int8(nearestInt(float32(iscale * scales[j]))))
				l = clampi(l, -32, 31) + 32
				if j < 8 {
					s[j] = byte(l & 0xf)
				} else {
					s[j-8] |= byte(l&0xf) << 4
				}
				l >>= 4
				s[j%4+8] |= byte(l) << (2 * (j / 4))
			}
			put16(b, 108, F32ToF16(1/iscale))
		} else {
			put16(b, 108, 0)
		}
		dall := fp16(b, 108)
		for j := 0; j < 16; j++ {
			var sc byte
			if j < 8 {
				sc = s[j] & 0xf
			} else {
				sc = s[j-8] >> 4
			}
			scv := int32(int8(sc|(s[8+j%4]>>(2*(j/4))&3)<<4)) - 32
			d := dall * float32(scv)
			if d == 0 {
				continue
			}
			for ii := 0; ii < 16; ii++ {
				L[16*j+ii] = int8(clampi(nearestInt(x[16*j+ii]/d), -4, 3) + 4)
			}
		}
		hm := b[0:32:32]
		clear(hm)
		m, bit := 0, byte(1)
		for j := 0; j < QK_K; j++ {
			if L[j] > 3 {
				hm[m] |= bit
				L[j] -= 4
			}
			if m++; m == 32 {
				m, bit = 0, bit<<1
			}
		}
		for j := range Lu {
			Lu[j] = uint8(L[j])
		}
		pack2bit(Lu[:], b[32:96])
	}
}

// k4Pack stores 8 six-bit scales and mins in Q4_K/Q5_K's 12 bytes.
func k4Pack(s []byte, j int, ls, lm uint8) {
	if j < 4 {
		s[j] = ls
		s[j+4] = lm
	} else {
		s[j+4] = ls&0xf | (lm&0xf)<<4
		s[j-4] |= (ls >> 4) << 6
		s[j] |= (lm >> 4) << 6
	}
}

// quantK45 is the shared body of the Q4_K (nmax 15) and Q5_K (nmax 31) ref
// quantizers; it fills b's d, dmin and scales and returns the levels in L.
func quantK45(x []float32, b []byte, L *[QK_K]uint8, nmax int32, rmin float32, nstep int) {
	var laux [32]uint8
	var weights [32]float32
	var mins, scales [8]float32
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := sqrtf(sumX2 / 32)
		for l, v := range xs {
			weights[l] = avX + absf(v)
		}
		scales[j], mins[j] = makeQKX2(nmax, xs, weights[:], L[32*j:32*j+32], laux[:], rmin, 0.1, nstep, false)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	s := b[4:16:16]
	clear(s)
	for j := 0; j < 8; j++ {
		ls := min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm := min(63, uint8(nearestInt(float32(invMin*mins[j]))))
		k4Pack(s, j, ls, lm)
	}
	put16(b, 0, F32ToF16(maxScale/63))
	put16(b, 2, F32ToF16(maxMin/63))
	dall, dmin := fp16(b, 0), fp16(b, 2)
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, s)
		d := dall * float32(sc)
		if d == 0 {
			continue
		}
		dm := float32(dmin * float32(m))
		for ii := 0; ii < 32; ii++ {
			L[32*j+ii] = uint8(clampi(nearestInt((x[32*j+ii]+dm)/d), 0, nmax))
		}
	}
}

func quantQ4_K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*q4kBytes : (i+1)*q4kBytes : (i+1)*q4kBytes]
		quantK45(x, b, &L, 15, -1, 20)
		for j := 0; j < 4; j++ {
			q := b[16+32*j : 48+32*j]
			for l := 0; l < 32; l++ {
				q[l] = L[64*j+l] | L[64*j+l+32]<<4
			}
		}
	}
}

func quantQ5_K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*q5kBytes : (i+1)*q5kBytes : (i+1)*q5kBytes]
		quantK45(x, b, &L, 31, -0.5, 15)
		qh := b[16:48:48]
		clear(qh)
		m1, m2 := byte(1), byte(2)
		for j := 0; j < 4; j++ {
			ql := b[48+32*j : 80+32*j]
			for l := 0; l < 32; l++ {
				l1, l2 := L[64*j+l], L[64*j+l+32]
				if l1 > 15 {
					l1 -= 16
					qh[l] |= m1
				}
				if l2 > 15 {
					l2 -= 16
					qh[l] |= m2
				}
				ql[l] = l1 | l2<<4
			}
			m1 <<= 2
			m2 <<= 2
		}
	}
}

func quantQ6_K(src []float32, dst []byte) {
	var L [QK_K]int8
	var scales [16]float32
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*q6kBytes : (i+1)*q6kBytes : (i+1)*q6kBytes]
		var maxScale, maxAbs float32
		for ib := 0; ib < 16; ib++ {
			scales[ib] = makeQX1(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
			if a := absf(scales[ib]); a > maxAbs {
				maxAbs, maxScale = a, scales[ib]
			}
		}
		if maxAbs < groupMaxEps {
			clear(b)
			continue
		}
		iscale := -128 / maxScale
		put16(b, 208, F32ToF16(1/iscale))
		for ib := 0; ib < 16; ib++ {
			b[192+ib] = byte(int8(min(127, nearestInt(float32(iscale*scales[ib])))))
		}
		dall := fp16(b, 208)
		for j := 0; j < 16; j++ {
			d := dall * float32(int8(b[192+j]))
			if d == 0 {
				continue
			}
			for ii := 0; ii < 16; ii++ {
				L[16*j+ii] = int8(clampi(nearestInt(x[16*j+ii]/d), -32, 31) + 32)
			}
		}
		for h := 0; h < 2; h++ {
			ql := b[64*h : 64*h+64]
			qh := b[128+32*h : 160+32*h]
			for l := 0; l < 32; l++ {
				j := 128*h + l
				q1, q2, q3, q4 := uint8(L[j]), uint8(L[j+32]), uint8(L[j+64]), uint8(L[j+96])
				ql[l] = q1&0xf | (q3&0xf)<<4
				ql[l+32] = q2&0xf | (q4&0xf)<<4
				qh[l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
			}
		}
	}
}
