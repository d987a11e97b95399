// Package kquant holds amd64 assembly, generated with avo (./gen), for the
// k-quant row dots in ggml's AVX2 order and the Q8_K activation quantizer.
// At init it registers them with kernels/cpukern when the CPU has AVX2, FMA
// and F16C; each reproduces its kernels/cpugen order (DotQ4_KAVX2,
// DotQ6_KAVX2) or quant.QuantizeRowX86(quant.Q8_K) bit for bit. Each order
// has a Dot, a 1×8 Tile (prefill; the repack order's AVX-512 kind has a
// 2×8 instead) and Rows (decode: one activation row against a block of
// weight rows in one call). On other
// architectures the package is empty and the portable code runs.
package kquant

//go:generate go run ./gen -out zz_kquant_amd64.s -stubs zz_stubs_amd64.go
