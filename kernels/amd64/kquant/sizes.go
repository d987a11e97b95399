package kquant

const (
	qk       = 256 // values per k-quant super-block
	q8kBytes = 292 // a Q8_K block: d f32, qs[256], bsums int16[16]
	tileX    = 8   // activation rows per Tile pass: 8 integer lane registers in the asm
)
