package quant

import "math"

// Ternary formats (BitNet b1.58 / TriLM): values in {-1, 0, 1} times d.
//
//	TQ1_0 (54): qs[48], qh[4], d f16. Each qs byte packs 5 trits and each qh
//	            byte 4 trits as a fixed-point fraction q = ceil(t*256/243), t
//	            the base-3 number; trit n is recovered as ((q*3^n mod 256)*3)>>8.
//	            qs[0:32] covers values 0..159 (trit n of byte m is value 32n+m),
//	            qs[32:48] values 160..239 (160+16n+m), qh values 240..255 (240+4n+j).
//	TQ2_0 (66): qs[64], d f16; 2 bits per value, q-1; byte 32h+m bits 2l hold
//	            value 128h+32l+m.

var pow3 = [6]uint8{1, 3, 9, 27, 81, 243}

// trit extracts base-3 digit n of a TQ1_0 byte as 0..2.
func trit(b byte, n int) int32 {
	q := b * pow3[n] // wraps mod 256 like ggml's uint8_t arithmetic
	return int32((uint16(q) * 3) >> 8)
}

func dequantTQ1_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*54 : i*54+54 : i*54+54]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d := fp16(b, 52)
		o := 0
		for n := 0; n < 5; n++ {
			for m := 0; m < 32; m++ {
				y[o] = float32(trit(b[m], n)-1) * d
				o++
			}
		}
		for n := 0; n < 5; n++ {
			for m := 0; m < 16; m++ {
				y[o] = float32(trit(b[32+m], n)-1) * d
				o++
			}
		}
		for n := 0; n < 4; n++ {
			for j := 0; j < 4; j++ {
				y[o] = float32(trit(b[48+j], n)-1) * d
				o++
			}
		}
	}
}

func dequantTQ2_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[i*66 : i*66+66 : i*66+66]
		y := dst[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		d := fp16(b, 64)
		o := 0
		for h := 0; h < 2; h++ {
			for l := uint(0); l < 4; l++ {
				for m := 0; m < 32; m++ {
					y[o] = float32(int32(b[32*h+m]>>(2*l)&3)-1) * d
					o++
				}
			}
		}
	}
}

func ternaryScale(x []float32) (d, id float32) {
	d = amaxOf(x)
	return d, inv(d)
}

// lroundTrit is lroundf(v)+1: half away from zero, mapped -1,0,1 -> 0,1,2.
func lroundTrit(v float32) int { return int(math.Round(float64(v))) + 1 }

// quantTQ1_0 is quantize_row_tq1_0_ref.
func quantTQ1_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*54 : i*54+54 : i*54+54]
		d, id := ternaryScale(x)
		put16(b, 52, F32ToF16(d))
		pack := func(vals func(n int) float32, digits int) byte {
			var q uint8
			for n := 0; n < digits; n++ {
				q = q*3 + uint8(lroundTrit(vals(n)*id))
			}
			if digits == 4 {
				q *= 3 // the first value becomes the most significant of 5 trits
			}
			return uint8((uint16(q)*256 + 242) / 243)
		}
		for m := 0; m < 32; m++ {
			b[m] = pack(func(n int) float32 { return x[m+32*n] }, 5)
		}
		for m := 0; m < 16; m++ {
			b[32+m] = pack(func(n int) float32 { return x[160+m+16*n] }, 5)
		}
		for j := 0; j < 4; j++ {
			b[48+j] = pack(func(n int) float32 { return x[240+j+4*n] }, 4)
		}
	}
}

// quantTQ2_0 is quantize_row_tq2_0_ref.
func quantTQ2_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K : (i+1)*QK_K]
		b := dst[i*66 : i*66+66 : i*66+66]
		d, id := ternaryScale(x)
		put16(b, 64, F32ToF16(d))
		for h := 0; h < 2; h++ {
			for m := 0; m < 32; m++ {
				var q byte
				for l := 0; l < 4; l++ {
					q |= byte(lroundTrit(x[128*h+32*l+m]*id)&3) << (2 * l)
				}
				b[32*h+m] = q
			}
		}
	}
}

func dotTQ1_0(n int, w, x []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*54 : i*54+54 : i*54+54]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		q8 := y[4:260:260]
		var sum int32
		for l := 0; l < 5; l++ {
			for m := 0; m < 32; m++ {
				sum += (trit(b[m], l) - 1) * int32(int8(q8[32*l+m]))
			}
		}
		for l := 0; l < 5; l++ {
			for m := 0; m < 16; m++ {
				sum += (trit(b[32+m], l) - 1) * int32(int8(q8[160+16*l+m]))
			}
		}
		for l := 0; l < 4; l++ {
			for j := 0; j < 4; j++ {
				sum += (trit(b[48+j], l) - 1) * int32(int8(q8[240+4*l+j]))
			}
		}
		sumf += float32(float32(sum) * (fp16(b, 52) * q8kD(y)))
	}
	return sumf
}

func dotTQ2_0(n int, w, x []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		b := w[i*66 : i*66+66 : i*66+66]
		y := x[i*q8kBytes : (i+1)*q8kBytes : (i+1)*q8kBytes]
		q8 := y[4:260:260]
		var sum int32
		for h := 0; h < 2; h++ {
			for l := uint(0); l < 4; l++ {
				for k := 0; k < 32; k++ {
					sum += int32(int8(q8[128*h+32*int(l)+k])) * (int32(b[32*h+k]>>(2*l)&3) - 1)
				}
			}
		}
		d := q8kD(y) * fp16(b, 64)
		sumf += float32(float32(sum) * d)
	}
	return sumf
}
