package neon

const (
	qk       = 256 // values per k-quant super-block
	q8kBytes = 292 // a Q8_K block: d f32, qs[256], bsums int16[16]
	q80QK    = 32  // values per Q8_0 block
	q80Bytes = 34  // a Q8_0 block: d f16, qs[32]
)
