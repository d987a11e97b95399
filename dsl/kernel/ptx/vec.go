package ptx

import (
	"math/bits"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// 16-byte loads. An Aligned U32 load from a byte window (a View) whose
// address the renderer can prove 16-byte aligned up to a constant offset
// loads its whole 16-byte chunk with one ld.global.v4.u32; the chunk's
// other words, asked for later in the same straight-line code, are the
// registers already loaded. A quant block's words (a unit of Q4_K reads
// eight in a row, the activation's sixteen) then take a quarter of the
// load instructions, each a full sector.
//
// The proof: byte buffers are passed 16-byte aligned (the launch ABI,
// docs/ptx.md), a window is as aligned as its parent and its offset, and
// an offset's alignment follows from its constants through +, −, ×, <<
// and the Lets that hold it (alignOf). The chunk must also lie inside the
// window: the window's size is a multiple of 16 and the load's index is
// a multiple of 16 plus the constant, so the chunk ends at or before the
// window's end whenever the load itself is in bounds.

// maxAlign is the most alignment the renderer tracks: one vector load.
const maxAlign = 16

// chunkKey names a 16-byte chunk: the window's address register, the
// register of the load's scaled index ("" for none) and the chunk's
// constant byte offset.
type chunkKey struct {
	base, idx string
	off       int64
}

// paramAlign is what the ABI promises of a buffer parameter's address.
func paramAlign(k kernel.Kind) int64 {
	if k == kernel.U8 {
		return maxAlign
	}
	return int64(k.Bytes())
}

// alignOf is a power of two (at most maxAlign) known to divide e's value,
// an integer expression; 1 when nothing is known.
func (f *fn) alignOf(e kernel.Expr) int64 {
	if e == nil || !e.Kind.IsInt() {
		return 1
	}
	switch e.Op {
	case kernel.OpConst:
		if e.Int == 0 {
			return maxAlign
		}
		return min(int64(1)<<bits.TrailingZeros64(uint64(e.Int)), maxAlign)
	case kernel.OpVar:
		if a, ok := f.valign[e.Var]; ok {
			return a
		}
		return 1
	case kernel.OpAdd, kernel.OpSub:
		return min(f.alignOf(e.Args[0]), f.alignOf(e.Args[1]))
	case kernel.OpMul:
		return min(f.alignOf(e.Args[0])*f.alignOf(e.Args[1]), maxAlign)
	case kernel.OpShl:
		if c := e.Args[1]; c.Op == kernel.OpConst && c.Int >= 0 && c.Int < 5 {
			return min(f.alignOf(e.Args[0])<<c.Int, maxAlign)
		}
	case kernel.OpCvt:
		if a := e.Args[0]; a.Kind.IsInt() && a.Kind.Bytes() <= e.Kind.Bytes() {
			return f.alignOf(a)
		}
	}
	return 1
}

// vecLoad is e (a load from b) as a word of a 16-byte chunk, loading the
// chunk if this stretch of code has not; false where the chunk's alignment
// or bounds are not proven.
func (f *fn) vecLoad(b *bufReg, e kernel.Expr) (string, bool) {
	if !e.Aligned || e.Kind != kernel.U32 || b.elem != kernel.U8 || b.size <= 0 || b.size%maxAlign != 0 || b.align < maxAlign {
		return "", false
	}
	idx, off := e.Args[0], int64(0)
	if idx.Op == kernel.OpAdd && idx.Args[1].Op == kernel.OpConst {
		off, idx = idx.Args[1].Int, idx.Args[0]
	}
	if idx.Op == kernel.OpConst {
		off, idx = off+idx.Int, nil
	}
	// the index a Let or loop variable: its register names the chunk (an
	// expression would be a new register at every load)
	if off < 0 || off%4 != 0 || (idx != nil && (idx.Op != kernel.OpVar || f.alignOf(idx) < maxAlign)) {
		return "", false
	}
	key := chunkKey{base: b.addr, off: off &^ (maxAlign - 1)}
	if idx != nil {
		key.idx = f.expr(idx)
	}
	w, ok := f.chunks[key]
	if !ok {
		a := b.addr
		if idx != nil {
			a = f.reg(c64)
			f.ins("add.s64 %s, %s, %s", a, b.addr, key.idx)
		}
		for i := range w {
			w[i] = f.reg(c32)
		}
		f.ins("%s.v4.u32 {%s, %s, %s, %s}, %s", b.ld(), w[0], w[1], w[2], w[3], at(a, key.off))
		f.chunks[key] = w
	}
	return w[(off-key.off)/4], true
}
