// Package kernel is the kernel level of the DSL: a small loop-nest IR in
// which each op's kernel is written once, in Go as the metalanguage, with the
// algorithm kept apart from its schedule. A Builder records typed
// expressions, loads and stores through byte- or element-addressed buffers,
// loops and reductions; Build checks them into a Kernel. Renderers (the
// interpreter here, the Go emitter in kernel/gosrc) turn a Kernel into
// something that runs; the interpreter is the reference semantics.
package kernel

import "fmt"

// Kind is a scalar type. f16 is not a kind: it is stored as U16 bits and
// widened with F16ToF32, so no target needs half arithmetic.
type Kind uint8

const (
	Invalid Kind = iota
	Bool
	U8
	I8
	U16
	U32
	I32
	Int // the index type: loop variables, lengths, offsets (Go int, 64-bit)
	F32
	F64
)

var kindNames = [...]string{"invalid", "bool", "u8", "i8", "u16", "u32", "i32", "int", "f32", "f64"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// IsFloat reports F32 and F64.
func (k Kind) IsFloat() bool { return k == F32 || k == F64 }

// IsInt reports the integer kinds (Int included, Bool not).
func (k Kind) IsInt() bool { return k >= U8 && k <= Int }

// Signed reports the signed integer kinds.
func (k Kind) Signed() bool { return k == I8 || k == I32 || k == Int }

// Bytes is the storage size of one value.
func (k Kind) Bytes() int {
	switch k {
	case Bool, U8, I8:
		return 1
	case U16:
		return 2
	case U32, I32, F32:
		return 4
	}
	return 8
}
