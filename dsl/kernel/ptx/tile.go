package ptx

import (
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// Tiles (dsl/kernel/tile.go) on the tensor cores: mma.sync m16n8k16 with
// f16 operands and f32 sums, a warp per grid iteration. Lane l is
// (g, t) = (l/4, l%4). The k order within one mma is free as long as both
// operands take the same, so lane t loads the 8 consecutive values
// 8t..8t+7 of each of its rows with one or two vector loads (no shared
// memory, no shuffles), and mma step s ∈ {0, 1} of a TileK = 32 chunk
// takes values 8t+4s..8t+4s+3 as the k indices 2t, 2t+1, 2t+8, 2t+9 the
// fragment layout gives the lane (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"): a's registers {row g, row g+8} × {those two pairs}, b's
// the two pairs of column g, the sums c0 c1 (row g) and c2 c3 (row g+8)
// at columns 2t, 2t+1.

// tileRegs are a tile's sums: four f32 registers a 16×8 piece, pieces
// row-major.
type tileRegs [][4]string

// zeroTiles is n pieces' sums, all zero.
func (f *fn) zeroTiles(n int) tileRegs {
	regs := make(tileRegs, n)
	for p := range regs {
		for e := range regs[p] {
			regs[p][e] = f.reg(cF32)
			f.ins("mov.f32 %s, 0f00000000", regs[p][e])
		}
	}
	return regs
}

// mma adds to piece d the product of A fragment a (a0..a3) and B fragment
// b0, b1.
func (f *fn) mma(d [4]string, a [4]string, b0, b1 string) {
	acc := strings.Join(d[:], ", ")
	f.ins("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%s}, {%s}, {%s, %s}, {%s}", acc, strings.Join(a[:], ", "), b0, b1, acc)
}

// ldmatrix loads four 8×8 f16 matrices from shared memory at addr+off
// (lane l giving row l%8 of matrix l/8), transposed with trans.
func (f *fn) ldmatrix(trans bool, addr string, off int) [4]string {
	var r [4]string
	for i := range r {
		r[i] = f.reg(c32)
	}
	t := ""
	if trans {
		t = ".trans"
	}
	f.ins("ldmatrix.sync.aligned.m8n8.x4%s.shared.b16 {%s}, [%s+%d]", t, strings.Join(r[:], ", "), addr, off)
	return r
}

func (f *fn) tileStmt(s *kernel.Stmt) {
	if f.sm < 80 {
		f.fail("tile %s: mma.m16n8k16 needs sm_80 or later", s.Tile.Name)
		return
	}
	if f.width != 32 || f.lane == "" {
		f.fail("tile %s: outside a warp's grid iteration", s.Tile.Name)
		return
	}
	t := s.Tile
	if s.Op == kernel.STile {
		f.tiles[t] = f.zeroTiles(t.M * t.N)
		return
	}
	regs, ok := f.tiles[t]
	if !ok {
		f.fail("tile %s used outside its scope", t.Name)
		return
	}
	args := make([]string, len(s.Args))
	for i, a := range s.Args {
		args[i] = f.r64(a)
	}
	g, l4 := f.reg(c64), f.reg(c64)
	f.ins("shr.u64 %s, %s, 2", g, f.lane)
	f.ins("and.b64 %s, %s, 3", l4, f.lane)
	if s.Op == kernel.STileStore {
		f.tileStore(s, regs, args, g, l4)
		return
	}
	// a: rows 16m+g and 16m+g+8 of piece row m, four f16 pairs each
	a := make([][2][4]string, t.M)
	for m := range a {
		for h := range 2 {
			a[m][h] = f.tileLoad(s.Buf, args[:4], kernel.Contiguous(s.Args[3]), 16*m+8*h, g, l4)
		}
	}
	c := make([][4]string, t.N)
	for n := range c {
		c[n] = f.tileLoad(s.Buf2, args[4:], kernel.Contiguous(s.Args[7]), 8*n, g, l4)
	}
	for st := range 2 {
		for m := range t.M {
			for n := range t.N {
				f.mma(regs[m*t.N+n], [4]string{a[m][0][2*st], a[m][1][2*st], a[m][0][2*st+1], a[m][1][2*st+1]}, c[n][2*st], c[n][2*st+1])
			}
		}
	}
}

// r64 is e in a fresh 64-bit register (constants included).
func (f *fn) r64(e kernel.Expr) string {
	r := f.reg(c64)
	f.ins("mov.b64 %s, %s", r, f.expr(e))
	return r
}

// tileLoad loads values 8t..8t+7 of operand row min(row0+g, rows−1) as four
// f16 pairs (lower k in the low half); op is the operand's offset, stride,
// rows and step, contiguous whether that step is the constant 1.
func (f *fn) tileLoad(buf *kernel.Buf, op []string, contiguous bool, row0 int, g, l4 string) [4]string {
	b := f.buf(buf)
	var out [4]string
	if b == nil {
		return out
	}
	off, stride, rows, step := op[0], op[1], op[2], op[3]
	row, last := f.reg(c64), f.reg(c64)
	f.ins("add.s64 %s, %s, %d", row, g, row0)
	f.ins("add.s64 %s, %s, -1", last, rows)
	f.ins("min.s64 %s, %s, %s", row, row, last)
	idx := f.reg(c64)
	f.ins("mad.lo.s64 %s, %s, %s, %s", idx, row, stride, off)
	for i := range out {
		out[i] = f.reg(c32)
	}
	if !contiguous {
		f.tileGather(buf, b.addr, idx, step, l4, out)
		return out
	}
	f.ins("mad.lo.s64 %s, %s, 8, %s", idx, l4, idx)
	addr := f.reg(c64)
	f.ins("shl.b64 %s, %s, %d", addr, idx, log2(buf.Elem.Bytes()))
	f.ins("add.s64 %s, %s, %s", addr, b.addr, addr)
	if buf.Elem == kernel.U16 {
		f.ins("ld.global.v4.b32 {%s}, [%s]", strings.Join(out[:], ", "), addr)
		return out
	}
	var x [8]string
	for i := range x {
		x[i] = f.reg(cF32)
	}
	f.ins("ld.global.v4.f32 {%s}, [%s]", strings.Join(x[:4], ", "), addr)
	f.ins("ld.global.v4.f32 {%s}, [%s+16]", strings.Join(x[4:], ", "), addr)
	for i := range out {
		// cvt.rn.f16x2.f32 d, a, b puts a in the upper half
		f.ins("cvt.rn.f16x2.f32 %s, %s, %s", out[i], x[2*i+1], x[2*i])
	}
	return out
}

// tileGather loads the 8 values idx + (8t+i)·step, i < 8, one at a time
// into the four f16 pairs out.
func (f *fn) tileGather(buf *kernel.Buf, base, idx, step, l4 string, out [4]string) {
	first, d := f.reg(c64), f.reg(c64)
	f.ins("shl.b64 %s, %s, 3", first, l4)
	f.ins("mad.lo.s64 %s, %s, %s, %s", first, first, step, idx)
	f.ins("shl.b64 %s, %s, %d", first, first, log2(buf.Elem.Bytes()))
	f.ins("add.s64 %s, %s, %s", first, base, first)
	f.ins("shl.b64 %s, %s, %d", d, step, log2(buf.Elem.Bytes()))
	var v [8]string
	addr := first
	for i := range v {
		if i > 0 {
			next := f.reg(c64)
			f.ins("add.s64 %s, %s, %s", next, addr, d)
			addr = next
		}
		if buf.Elem == kernel.U16 {
			v[i] = f.reg(c32)
			f.ins("ld.global.u16 %s, [%s]", v[i], addr)
		} else {
			v[i] = f.reg(cF32)
			f.ins("ld.global.f32 %s, [%s]", v[i], addr)
		}
	}
	for i := range out {
		if buf.Elem == kernel.U16 {
			f.ins("prmt.b32 %s, %s, %s, 0x5410", out[i], v[2*i], v[2*i+1]) // v[2i] low, v[2i+1] high
		} else {
			f.ins("cvt.rn.f16x2.f32 %s, %s, %s", out[i], v[2*i+1], v[2*i])
		}
	}
}

// tileStore stores each lane's sums under the bounds: piece (m, n) sum e
// is row 16m+g+8·(e/2), column 8n+2t+e%2.
func (f *fn) tileStore(s *kernel.Stmt, regs tileRegs, args []string, g, l4 string) {
	b := f.buf(s.Buf)
	if b == nil {
		return
	}
	off, stride, rows, cols := args[0], args[1], args[2], args[3]
	t := s.Tile
	col0 := f.reg(c64)
	f.ins("shl.b64 %s, %s, 1", col0, l4)
	for m := range t.M {
		for n := range t.N {
			for e := range 4 {
				row, col := f.reg(c64), f.reg(c64)
				f.ins("add.s64 %s, %s, %d", row, g, 16*m+8*(e/2))
				f.ins("add.s64 %s, %s, %d", col, col0, 8*n+e%2)
				p := f.reg(cPred)
				f.ins("setp.lt.s64 %s, %s, %s", p, col, cols)
				f.ins("setp.lt.and.s64 %s, %s, %s, %s", p, row, rows, p)
				idx := f.reg(c64)
				f.ins("mad.lo.s64 %s, %s, %s, %s", idx, row, stride, off)
				f.ins("add.s64 %s, %s, %s", idx, idx, col)
				f.ins("shl.b64 %s, %s, 2", idx, idx)
				f.ins("add.s64 %s, %s, %s", idx, b.addr, idx)
				f.ins("@%s st.global.f32 [%s], %s", p, idx, regs[m*t.N+n][e])
			}
		}
	}
	f.sync() // the other lanes may read these sums next
}
