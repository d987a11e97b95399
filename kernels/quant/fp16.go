package quant

import "math"

// f16Table maps every binary16 pattern to its float32 value. ggml's CPU
// backend decodes fp16 the same exact way (the conversion has no rounding), and
// a table lookup keeps the dot-product inner loops free of branches.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return &t
}()

// F16ToF32 converts an IEEE binary16 value to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf or NaN; NaN payload is kept
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// subnormal half: normalise into a float32 normal
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// F32ToF16 converts float32 to binary16 with round-to-nearest-even, as x86's
// F16C vcvtps2ph with rounding mode 0 does (ggml's GGML_FP32_TO_FP16 there):
// overflow gives ±inf, a NaN stays a NaN with the quiet bit set.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 112 // rebias 127 -> 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 { // below half the smallest subnormal: rounds to zero
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++ // may carry into the smallest normal, which is the right encoding
		}
		return sign | uint16(q)
	}
	q := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++ // a carry into the exponent is correct, up to and including inf
	}
	return sign | uint16(q)
}

// BF16ToF32 widens a bfloat16 value (the top half of a float32).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows float32 to bfloat16 the way ggml_compute_fp32_to_bf16
// does: round to nearest even on the dropped 16 bits, NaNs forced quiet.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + ((u >> 16) & 1))) >> 16)
}

// e8m0Half is ggml's GGML_E8M0_TO_FP32_HALF: 2^(e-128), i.e. half the MX
// block scale, because MXFP4's value table stores doubled E2M1 values.
func e8m0Half(e uint8) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// le16 and le32 read little-endian fields; small enough to inline.
func le16(b []byte, off int) uint16 { return uint16(b[off]) | uint16(b[off+1])<<8 }

func le32(b []byte, off int) uint32 {
	return uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24
}

func put16(b []byte, off int, v uint16) { b[off] = byte(v); b[off+1] = byte(v >> 8) }

func put32(b []byte, off int, v uint32) {
	b[off] = byte(v)
	b[off+1] = byte(v >> 8)
	b[off+2] = byte(v >> 16)
	b[off+3] = byte(v >> 24)
}

// fp16 reads a little-endian binary16 field as float32.
func fp16(b []byte, off int) float32 { return f16Table[le16(b, off)] }
