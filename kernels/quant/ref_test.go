package quant

// An independent, deliberately literal float64 decoder for every format,
// written element by element from the layout descriptions rather than from
// ggml's loops, plus generators of random blocks with sane scales.

import (
	"math"
	"math/rand/v2"
)

func h16(b []byte, off int) float64 { return float64(F16ToF32(uint16(b[off]) | uint16(b[off+1])<<8)) }

// bit returns bit i of the little-endian bit string b.
func bit(b []byte, i int) int { return int(b[i/8]>>(i%8)) & 1 }

// nib returns nibble k of b: even k is a low nibble, odd k a high one.
func nib(b []byte, k int) int { return int(b[k/2]>>(4*(k%2))) & 0xf }

var iq4nl = []float64{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
var e2m1 = []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6}

// legacyNibble is the 4-bit code of value i (0..31) of a 32-value block whose
// packed nibbles start at qs: value i<16 is the low nibble of byte i, value
// i>=16 the high nibble of byte i-16.
func legacyNibble(qs []byte, i int) int {
	if i < 16 {
		return int(qs[i] & 0xf)
	}
	return int(qs[i-16] >> 4)
}

// k6 reads Q4_K/Q5_K's 6-bit scale (want=0) or min (want=1) of sub-block j.
// Bytes 0..3 hold scales 0..3 in their low 6 bits, bytes 4..7 mins 0..3;
// bytes 8..11 hold the low 4 bits of scale j+4 (low nibble) and min j+4
// (high nibble), whose top 2 bits are the top 2 bits of bytes j and j+4.
func k6(s []byte, j, want int) int {
	if j < 4 {
		return int(s[j+4*want]) & 63
	}
	lo := int(s[j+4]>>(4*want)) & 0xf
	hi := int(s[j-4+4*want]) >> 6
	return lo | hi<<4
}

func refDecodeBlock(t Type, b []byte, out []float64) {
	switch t {
	case F32:
		out[0] = float64(math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
	case F16:
		out[0] = h16(b, 0)
	case BF16:
		out[0] = float64(math.Float32frombits((uint32(b[0]) | uint32(b[1])<<8) << 16))
	case Q4_0:
		for i := range 32 {
			out[i] = float64(legacyNibble(b[2:], i)-8) * h16(b, 0)
		}
	case Q4_1:
		for i := range 32 {
			out[i] = float64(float64(legacyNibble(b[4:], i))*h16(b, 0)) + h16(b, 2)
		}
	case Q5_0:
		for i := range 32 {
			q := legacyNibble(b[6:], i) + 16*bit(b[2:6], i)
			out[i] = float64(q-16) * h16(b, 0)
		}
	case Q5_1:
		for i := range 32 {
			q := legacyNibble(b[8:], i) + 16*bit(b[4:8], i)
			out[i] = float64(float64(q)*h16(b, 0)) + h16(b, 2)
		}
	case Q8_0:
		for i := range 32 {
			out[i] = float64(int8(b[2+i])) * h16(b, 0)
		}
	case Q8_1:
		for i := range 32 {
			out[i] = float64(int8(b[4+i])) * h16(b, 0)
		}
	case IQ4_NL:
		for i := range 32 {
			out[i] = iq4nl[legacyNibble(b[2:], i)] * h16(b, 0)
		}
	case MXFP4:
		scale := math.Ldexp(1, int(b[0])-127)
		for i := range 32 {
			out[i] = e2m1[legacyNibble(b[1:], i)] * scale
		}
	case Q8_K:
		d := float64(math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
		for i := range 256 {
			out[i] = float64(int8(b[4+i])) * d
		}
	case Q2_K:
		// value i: 128-group g, bit pair p, byte l of the group's 32 bytes
		for i := range 256 {
			g, r := i/128, i%128
			p, l := r/32, r%32
			q := int(b[16+32*g+l]>>(2*p)) & 3
			sc := b[i/16]
			out[i] = float64(h16(b, 80)*float64(sc&0xf)*float64(q)) - float64(h16(b, 82)*float64(sc>>4))
		}
	case Q3_K:
		for i := range 256 {
			g, r := i/128, i%128
			p, l := r/32, r%32
			q := int(b[32+32*g+l]>>(2*p)) & 3
			// high bit of value i: bit (i/32) of hmask byte i%32; clear means -4
			if bit(b[0:32], 8*l+i/32) == 0 {
				q -= 4
			}
			j := i / 16
			// 6-bit scale j: low 4 bits are nibble j of bytes 0..7, high 2
			// bits are bit pair j/4 of byte 8 + j%4
			sc := nib(b[96:104], 2*(j%8)+j/8) | (int(b[104+j%4])>>(2*(j/4))&3)<<4
			out[i] = h16(b, 108) * float64(sc-32) * float64(q)
		}
	case Q4_K:
		for i := range 256 {
			j := i / 32
			q := int(b[16+32*(i/64)+i%32]>>(4*(j%2))) & 0xf
			out[i] = float64(h16(b, 0)*float64(k6(b[4:16], j, 0))*float64(q)) - float64(h16(b, 2)*float64(k6(b[4:16], j, 1)))
		}
	case Q5_K:
		for i := range 256 {
			j := i / 32
			q := int(b[48+32*(i/64)+i%32]>>(4*(j%2)))&0xf + 16*bit(b[16:48], 8*(i%32)+j)
			out[i] = float64(h16(b, 0)*float64(k6(b[4:16], j, 0))*float64(q)) - float64(h16(b, 2)*float64(k6(b[4:16], j, 1)))
		}
	case Q6_K:
		for i := range 256 {
			g, r := i/128, i%128
			p, l := r/32, r%32 // p: which quarter of the 128-group
			lo := int(b[64*g+32*(p%2)+l]>>(4*(p/2))) & 0xf
			hi := int(b[128+32*g+l]>>(2*p)) & 3
			out[i] = h16(b, 208) * float64(int8(b[192+i/16])) * float64(lo|hi<<4-32)
		}
	case IQ4_XS:
		for i := range 256 {
			j := i / 32
			ls := nib(b[4:8], j) | (int(uint16(b[2])|uint16(b[3])<<8)>>(2*j)&3)<<4
			q := legacyNibble(b[8+16*j:], i%32)
			out[i] = h16(b, 0) * float64(ls-32) * iq4nl[q]
		}
	case TQ2_0:
		for i := range 256 {
			h, r := i/128, i%128
			l, m := r/32, r%32
			out[i] = float64(int(b[32*h+m]>>(2*l))&3-1) * h16(b, 64)
		}
	case TQ1_0:
		// digit n (0 = most significant) of byte q is floor(q*3^(n+1)/256) mod 3
		digit := func(q byte, n int) int {
			p := 1
			for range n + 1 {
				p *= 3
			}
			return (int(q) * p / 256) % 3
		}
		for i := range 256 {
			var q byte
			var n int
			switch {
			case i < 160:
				q, n = b[i%32], i/32
			case i < 240:
				q, n = b[32+(i-160)%16], (i-160)/16
			default:
				q, n = b[48+(i-240)%4], (i-240)/4
			}
			out[i] = float64(digit(q, n)-1) * h16(b, 52)
		}
	default:
		panic("no reference decoder for " + t.String())
	}
}

func refDecode(t Type, src []byte, n int) []float64 {
	l, _ := LayoutOf(t)
	out := make([]float64, n)
	for i := 0; i < n/l.BlockSize; i++ {
		refDecodeBlock(t, src[i*l.BlockBytes:(i+1)*l.BlockBytes], out[i*l.BlockSize:(i+1)*l.BlockSize])
	}
	return out
}

// saneF16 is a random finite half of magnitude in [2^lo, 2^hi), either sign.
func saneF16(r *rand.Rand, lo, hi int) uint16 {
	v := math.Ldexp(1+r.Float64(), lo+r.IntN(hi-lo))
	if r.IntN(2) == 0 {
		v = -v
	}
	return F32ToF16(float32(v))
}

// scaleFields lists the fp16 scale offsets inside one block of t.
var scaleFields = map[Type][]int{
	Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, Q8_0: {0}, Q8_1: {0, 2},
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208},
	IQ4_NL: {0}, IQ4_XS: {0}, TQ1_0: {52}, TQ2_0: {64},
}

// randomBlocks returns n values' worth of random blocks of t: random payload
// bytes with scale fields set to sane finite values.
func randomBlocks(r *rand.Rand, t Type, n int) []byte {
	l, _ := LayoutOf(t)
	nb := n / l.BlockSize
	b := make([]byte, nb*l.BlockBytes)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for i := 0; i < nb; i++ {
		blk := b[i*l.BlockBytes : (i+1)*l.BlockBytes]
		switch t {
		case F32:
			put32(blk, 0, math.Float32bits(float32(r.NormFloat64())))
		case F16:
			put16(blk, 0, saneF16(r, -14, 4))
		case BF16:
			put16(blk, 0, F32ToBF16(float32(r.NormFloat64())))
		case MXFP4:
			blk[0] = byte(110 + r.IntN(30))
		case Q8_K:
			// an fp16-representable d keeps d*q exact in float32
			put32(blk, 0, math.Float32bits(F16ToF32(saneF16(r, -10, -4))))
		default:
			for _, off := range scaleFields[t] {
				put16(blk, off, saneF16(r, -10, -4))
			}
		}
	}
	return b
}
