// Package quant describes ggml's tensor element types: their block layout and
// size, and (in other files) how to decode and dot them. The numbering is
// ggml's (enum ggml_type) so that GGUF and .jlm files share one vocabulary.
package quant

import "fmt"

// Type is a ggml tensor element type, numbered as in ggml.h.
type Type uint32

const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

// Layout is the storage shape of one type: BlockSize elements are stored in
// BlockBytes bytes, and a row must hold a whole number of blocks.
type Layout struct {
	Name       string
	BlockSize  int
	BlockBytes int
}

// QK_K is the super-block size of the k-quants and i-quants.
const QK_K = 256

var layouts = map[Type]Layout{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	BF16:    {"BF16", 1, 2},
	F64:     {"F64", 1, 8},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	Q4_0:    {"Q4_0", 32, 2 + 16},
	Q4_1:    {"Q4_1", 32, 2 + 2 + 16},
	Q5_0:    {"Q5_0", 32, 2 + 4 + 16},
	Q5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0:    {"Q8_0", 32, 2 + 32},
	Q8_1:    {"Q8_1", 32, 2 + 2 + 32},
	Q2_K:    {"Q2_K", QK_K, 16 + 64 + 2 + 2},
	Q3_K:    {"Q3_K", QK_K, 32 + 64 + 12 + 2},
	Q4_K:    {"Q4_K", QK_K, 2 + 2 + 12 + 128},
	Q5_K:    {"Q5_K", QK_K, 2 + 2 + 12 + 32 + 128},
	Q6_K:    {"Q6_K", QK_K, 128 + 64 + 16 + 2},
	Q8_K:    {"Q8_K", QK_K, 4 + 256 + 32},
	IQ2_XXS: {"IQ2_XXS", QK_K, 2 + 64},
	IQ2_XS:  {"IQ2_XS", QK_K, 2 + 64 + 8},
	IQ2_S:   {"IQ2_S", QK_K, 2 + 64 + 8 + 8},
	IQ3_XXS: {"IQ3_XXS", QK_K, 2 + 96},
	IQ3_S:   {"IQ3_S", QK_K, 2 + 64 + 8 + 32 + 4},
	IQ1_S:   {"IQ1_S", QK_K, 2 + 32 + 16},
	IQ1_M:   {"IQ1_M", QK_K, 32 + 16 + 8},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ4_XS:  {"IQ4_XS", QK_K, 2 + 2 + 4 + 128},
	TQ1_0:   {"TQ1_0", QK_K, 48 + 4 + 2},
	TQ2_0:   {"TQ2_0", QK_K, 64 + 2},
	MXFP4:   {"MXFP4", 32, 1 + 16},
}

// LayoutOf returns the layout of t, or false if t is not a type this build knows.
func LayoutOf(t Type) (Layout, bool) {
	l, ok := layouts[t]
	return l, ok
}

// Known reports whether t is a ggml type this build knows.
func (t Type) Known() bool { _, ok := layouts[t]; return ok }

func (t Type) String() string {
	if l, ok := layouts[t]; ok {
		return l.Name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// ParseType maps a name such as "Q4_K" (any case) to its type.
func ParseType(name string) (Type, bool) {
	for t, l := range layouts {
		if equalFold(l.Name, name) {
			return t, true
		}
	}
	return 0, false
}

// Types lists every known type in ggml's numbering order.
func Types() []Type {
	out := make([]Type, 0, len(layouts))
	for t := Type(0); t < 64; t++ {
		if t.Known() {
			out = append(out, t)
		}
	}
	return out
}

// RowBytes is the byte size of a row of n elements of type t. It fails when n
// is not a whole number of blocks or t is unknown.
func RowBytes(t Type, n int64) (int64, error) {
	l, ok := layouts[t]
	if !ok {
		return 0, fmt.Errorf("unknown ggml type %d", uint32(t))
	}
	if n < 0 || n%int64(l.BlockSize) != 0 {
		return 0, fmt.Errorf("row of %d elements is not a multiple of %s's block size %d", n, l.Name, l.BlockSize)
	}
	return n / int64(l.BlockSize) * int64(l.BlockBytes), nil
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 32
		}
		if 'a' <= y && y <= 'z' {
			y -= 32
		}
		if x != y {
			return false
		}
	}
	return true
}
