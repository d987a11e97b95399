// Package vexvnni emits AVX-VNNI's VEX-encoded dot-product instructions
// from avo generators. Go's assembler (and so avo) encodes VPDPBUSD and
// VPDPWSSD only in their EVEX form, which needs AVX512VL+AVX512_VNNI; CPUs
// with AVX-VNNI but no AVX-512 (Alder Lake, Zen 5 client) need the VEX form
// (VEX.256.66.0F38.W0 50 /r and 52 /r), written here as BYTE directives.
//
// The instruction goes into avo's function as an ordinary ir.Instruction
// (its inputs and output declared, so liveness and register allocation see
// it); its bytes are computed when the file is printed, after allocation,
// from the physical registers avo chose. Operands are YMM registers Y0-Y15
// (VEX cannot name Y16-Y31): printing panics otherwise, so a kernel that
// needs more than 16 live vectors fails at go generate, not at run time.
package vexvnni

import (
	"fmt"
	"strings"

	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Opcodes of the VEX.256.66.0F38.W0 forms (Intel SDM, VPDPBUSD/VPDPWSSD).
const (
	OpDPBUSD = 0x50 // u8·s8, four products a dword lane, added to it
	OpDPWSSD = 0x52 // s16·s16, two products a dword lane, added to it
)

var names = map[byte]string{OpDPBUSD: "VPDPBUSD", OpDPWSSD: "VPDPWSSD"}

// Encode returns the VEX encoding of op with Intel operands (acc, a, b):
// acc += a·b lane-wise, all YMM registers numbered 0-15.
func Encode(op byte, acc, a, b int) ([]byte, error) {
	if _, ok := names[op]; !ok {
		return nil, fmt.Errorf("vexvnni: opcode %#x is not VPDPBUSD or VPDPWSSD", op)
	}
	for _, r := range []int{acc, a, b} {
		if r < 0 || r > 15 {
			return nil, fmt.Errorf("vexvnni: %s needs Y0-Y15, got Y%d", names[op], r)
		}
	}
	inv := func(r int) byte { return byte(^r>>3) & 1 } // VEX stores R and B inverted
	return []byte{
		0xc4,                                  // three-byte VEX
		inv(acc)<<7 | 1<<6 | inv(b)<<5 | 0x02, // R̄ X̄ B̄, map 0F38
		0<<7 | byte(^a&15)<<3 | 1<<2 | 0x01,   // W0, v̄v̄v̄v̄ = a, L = 256, pp = 66
		op,                                    //
		0xc0 | byte(acc&7)<<3 | byte(b&7),     // ModRM: register form
	}, nil
}

// VPDPBUSD adds to acc, per dword lane, the four products of a's unsigned
// bytes with b's signed bytes. Operands in Go/avo order (b, a, acc), as
// avo's VPDPBUSD takes them.
func VPDPBUSD(b, a, acc reg.Register) { emit(OpDPBUSD, b, a, acc) }

// VPDPWSSD adds to acc, per dword lane, the two products of a's and b's
// signed words, in Go/avo order (b, a, acc).
func VPDPWSSD(b, a, acc reg.Register) { emit(OpDPWSSD, b, a, acc) }

func emit(op byte, b, a, acc reg.Register) {
	for _, r := range []reg.Register{b, a, acc} {
		if r.Size() != 32 || r.Kind() != reg.KindVector {
			panic(fmt.Sprintf("vexvnni: %s takes YMM registers, got %s", names[op], r.Asm()))
		}
	}
	i := &ir.Instruction{
		Opcode:  "BYTE",
		Inputs:  []operand.Op{b, a, acc},
		Outputs: []operand.Op{acc},
		ISA:     []string{"AVXVNNI"},
	}
	i.Operands = []operand.Op{raw{Physical: reg.Y0, op: op, ins: i}}
	addInstruction(i)
}

// addInstruction adds to avo's global context, which generators build in.
var addInstruction = build.Instruction

// raw is the instruction's one printed operand: its bytes, computed from
// the registers bound to the instruction's Inputs (physical by the time avo
// prints). avo's passes accept only their own operand kinds, so raw poses
// as a physical register (which allocation leaves alone; the embedded Y0 is
// never printed and, being no Input or Output, never live); only Asm differs.
type raw struct {
	reg.Physical
	op  byte
	ins *ir.Instruction
}

func (r raw) Asm() string {
	var n [3]int
	for k, o := range r.ins.Inputs { // b, a, acc
		p := reg.ToPhysical(o.(reg.Register))
		if p == nil {
			panic(fmt.Sprintf("vexvnni: %s printed before register allocation", names[r.op]))
		}
		n[k] = int(p.PhysicalIndex())
	}
	enc, err := Encode(r.op, n[2], n[1], n[0])
	if err != nil {
		panic(err) // the kernel keeps more than 16 vectors live: avo gave Y16+
	}
	s := make([]string, len(enc))
	for k, v := range enc {
		s[k] = fmt.Sprintf("$0x%02x", v)
	}
	return fmt.Sprintf("%s // %s Y%d, Y%d, Y%d", strings.Join(s, "; BYTE "), names[r.op], n[0], n[1], n[2])
}
