package exec

import (
	"math"
	"sync"

	"github.com/jitllm/jitllm/kernels/quant"
)

// f16tab maps every binary16 pattern to its float32 value (quant's
// conversion, looked up instead of computed in the attention loops).
var f16tab = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = quant.F16ToF32(uint16(h))
	}
	return &t
})

// f32tof16 is quant.F32ToF16 (round to nearest, ties to even) with the
// values whose result is a normal binary16 or infinity done inline: adding
// 0xfff plus the kept mantissa's low bit rounds the 13 dropped bits to even,
// a carry moving into the exponent as it should. The rest (subnormals,
// zeros, NaN, overflow from far out of range) go to quant.
func f32tof16(f float32) uint16 {
	b := math.Float32bits(f)
	if e := (b >> 23) & 0xff; e-113 < 30 { // exponents 113..142: binary16 1..30
		r := b&0x7fffffff + 0xfff + (b>>13)&1
		return uint16(b>>16)&0x8000 | uint16(r>>13-112<<10)
	}
	return quant.F32ToF16(f)
}
