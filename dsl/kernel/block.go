package kernel

import "fmt"

// A block product is a CTA's share of a matrix product on the tensor
// cores: its warps, WM by WN of them, each sum a tile of M×N 16×8 pieces
// of y = a·cᵀ over the whole k extent, the CTA staging the operands it
// shares through its shared memory (a GPU target pipelines those copies
// with the products). The operands and sums are those of TileMMA: values
// rounded to f16, products exact in f32, sums in the hardware's order (the
// interpreter adds TileK products at a time in k order, in f32), so a
// target matches the interpreter within rounding.

// BlockShape is a block product's warps (WM×WN) and each warp's tile of
// M×N 16×8 pieces: the CTA covers Rows() rows of a by Cols() rows of c.
type BlockShape struct{ WM, WN, M, N int }

// Threads is the CTA the block product runs on: a warp per warp tile.
func (s BlockShape) Threads() int { return 32 * s.WM * s.WN }

// Rows and Cols are the product's extents: a's rows, c's rows.
func (s BlockShape) Rows() int { return 16 * s.M * s.WM }
func (s BlockShape) Cols() int { return 8 * s.N * s.WN }

func (s BlockShape) String() string {
	return fmt.Sprintf("%dx%d warps of %dx%d", s.WM, s.WN, 16*s.M, 8*s.N)
}

// check reports why s is no shape a target renders: warps of up to 8 per
// side and 8 in all, warp tiles of up to 4×8 pieces (the sums' 128
// registers) with N even (c's fragments come two pieces at a time), and
// every thread copying whole 16-byte chunks of each operand.
func (s BlockShape) check() error {
	switch {
	case s.WM < 1 || s.WN < 1 || s.WM*s.WN > 8:
		return fmt.Errorf("%d×%d warps (1 to 8 in all)", s.WM, s.WN)
	case s.M < 1 || s.M > 4 || s.N < 2 || s.N > 8 || s.N%2 != 0:
		return fmt.Errorf("warp tiles of %d×%d pieces (M 1 to 4, N 2 to 8 and even)", s.M, s.N)
	case s.Rows()*TileK/8%s.Threads() != 0 || s.Cols()*TileK/8%s.Threads() != 0:
		return fmt.Errorf("%v: %d threads do not share the operands' 8-value chunks evenly", s, s.Threads())
	}
	return nil
}

// BlockMatMul sets y[y.Off + i·y.Stride + j] = Σ_{k<kn} a_i[k]·c_j[k] for
// the rows i < min(y.Rows, sh.Rows()) and columns j < min(cols, sh.Cols()),
// a_i and c_j the operands' rows as a TileOperand reads them (rows past
// the last read the last again) and kn a multiple of TileK. Operands are
// contiguous rows (no Step), a's F32 or U16 (f16 bits), c's U16; y is F32.
// It runs on a CTA of sh.Threads() (the kernel's cooperative width) and,
// like a cooperative loop's, its stores are ordered before any later
// access of the CTA's other threads.
func (b *Builder) BlockMatMul(sh BlockShape, a, c TileOperand, kn Expr, y TileOperand, cols Expr) {
	args := []Expr{a.Off, a.Stride, a.Rows, c.Off, c.Stride, c.Rows, kn, y.Off, y.Stride, y.Rows, cols}
	if err := sh.check(); err != nil {
		b.fail("block product: %v", err)
		return
	}
	switch {
	case !b.check("block product", args...):
	case b.par != 1:
		b.fail("block product: outside the kernel's ParallelFor")
	case a.Step != nil || c.Step != nil || y.Step != nil:
		b.fail("block product: a Step (operands and output are contiguous rows)")
	case !tileElem(a.Buf) || c.Buf.Elem != U16 || y.Buf.Elem != F32:
		b.fail("block product: operands of %s and %s into %s (want F32 or U16, U16, F32)", a.Buf.Elem, c.Buf.Elem, y.Buf.Elem)
	case !allInt(args):
		b.fail("block product: offsets, strides, rows and extents must be Int")
	default:
		b.emit(&Stmt{Op: SBlockMatMul, Block: &sh, Buf: a.Buf, Buf2: c.Buf, Out: y.Buf, Args: args})
	}
}

// BlockThreads is the CTA of the block statements in ss (block products
// and attentions; 0 when there are none).
func BlockThreads(ss []*Stmt) int {
	for _, s := range ss {
		if w := blockWidth(s); w != 0 {
			return w
		}
		if w := BlockThreads(s.Body); w != 0 {
			return w
		}
	}
	return 0
}

// blockWidth is the CTA block statement s runs on, 0 for other statements.
func blockWidth(s *Stmt) int {
	switch s.Op {
	case SBlockMatMul:
		return s.Block.Threads()
	case SBlockAttention:
		return s.Attn.Threads()
	}
	return 0
}

// blockMatMul interprets a block product: TileK products at a time added
// to each sum in k order, in f32.
func (m *machine) blockMatMul(s *Stmt) {
	ev := make([]int, len(s.Args))
	for i, a := range s.Args {
		ev[i] = int(m.eval(a).i)
	}
	sh := s.Block
	kn, off, stride, rows, cols := ev[6], ev[7], ev[8], min(ev[9], sh.Rows()), min(ev[10], sh.Cols())
	if kn < 0 || kn%TileK != 0 {
		fail("block product: k extent %d is not a multiple of %d", kn, TileK)
	}
	sums := make([]float32, rows*cols)
	for k0 := 0; k0 < kn && rows > 0 && cols > 0; k0 += TileK {
		a := m.tileRows(s.Buf, ev[0]+k0, ev[1], ev[2], 1, rows)
		c := m.tileRows(s.Buf2, ev[3]+k0, ev[4], ev[5], 1, cols)
		for i := range rows {
			for j := range cols {
				sum := sums[i*cols+j]
				for k := range TileK {
					sum += float32(a[i*TileK+k] * c[j*TileK+k])
				}
				sums[i*cols+j] = sum
			}
		}
	}
	for i := range rows {
		for j := range cols {
			m.store(s.Out, off+i*stride+j, val{f: float64(sums[i*cols+j])})
		}
	}
}
