package kernel

// Tiles are a GPU's matrix units (tensor cores) in the IR: a warp holds a
// tile of f32 sums, 16·M rows by 8·N columns, and adds to it the product
// of two operands read straight from memory, 32 values along k at a time.
// The operands' values are rounded to f16 (f16 buffers hold them already)
// and their products are exact in f32; the order and rounding of the sums
// are the hardware's, so unlike the rest of the IR a target's tile results
// match the interpreter's within rounding, not bit for bit (the
// interpreter adds the 32 products of each step to the sum in k order, in
// f32). Only targets with matrix units render tiles (the GPU's); the
// kernels that use them are GPU kernels.

// TileK is the values along k of one TileMMA.
const TileK = 32

// TileAlign is what every contiguous operand row's first element and stride
// must be a multiple of (in elements): the lanes load 8 values at once.
const TileAlign = 8

// Tile is a warp's accumulator tile: 16·M rows, 8·N columns.
type Tile struct {
	Name string
	M, N int
}

// Rows and Cols are the tile's extents.
func (t *Tile) Rows() int { return 16 * t.M }
func (t *Tile) Cols() int { return 8 * t.N }

// TileOperand is rows of one operand in memory: row i's TileK values start
// at Off + min(i, Rows−1)·Stride of Buf (rows past the last read the last
// again, as the prefill products' padding does: computed, never stored)
// and lie Step apart (nil: 1, neighbours; any other Step reads a column of
// a row-major matrix as an operand row, value by value).
type TileOperand struct {
	Buf               *Buf // F32 (rounded to f16 as loaded) or U16 (f16 bits)
	Off, Stride, Rows Expr
	Step              Expr
}

// step is o's Step, 1 when nil.
func (o TileOperand) step() Expr {
	if o.Step == nil {
		return I(1)
	}
	return o.Step
}

// Contiguous reports whether a tile operand's step argument is the
// constant 1 (its rows' values are neighbours: vector loads on a GPU).
func Contiguous(step Expr) bool { return step.Op == OpConst && step.Int == 1 }

// NewTile declares a tile of m×n 16×8 pieces, all zero. Tiles live in one
// iteration of the kernel's ParallelFor, which a warp runs.
func (b *Builder) NewTile(name string, m, n int) *Tile {
	t := &Tile{Name: name, M: m, N: n}
	switch {
	case m < 1 || n < 1 || m*n > 16:
		b.fail("tile %s: %d×%d pieces (1 to 16 in all)", name, m, n)
	case b.par != 1:
		b.fail("tile %s: declared outside the kernel's ParallelFor", name)
	default:
		b.emit(&Stmt{Op: STile, Tile: t})
	}
	return t
}

// TileMMA adds to t the product of a (its t.Rows() rows) and the
// transpose of c (t.Cols() rows): t[i][j] += Σ_{k<TileK} a_i[k]·c_j[k].
// Its Args are each operand's Off, Stride, Rows and Step.
func (b *Builder) TileMMA(t *Tile, a, c TileOperand) {
	args := []Expr{a.Off, a.Stride, a.Rows, a.step(), c.Off, c.Stride, c.Rows, c.step()}
	switch {
	case !b.check("tile mma "+t.Name, args...):
	case !tileElem(a.Buf) || !tileElem(c.Buf):
		b.fail("tile mma %s: operands of %s and %s (want F32 or U16)", t.Name, a.Buf.Elem, c.Buf.Elem)
	case !allInt(args):
		b.fail("tile mma %s: offsets, strides and rows must be Int", t.Name)
	default:
		b.emit(&Stmt{Op: STileMMA, Tile: t, Buf: a.Buf, Buf2: c.Buf, Args: args})
	}
}

// TileStore stores t[i][j] at y.Off + i·y.Stride + j for the rows below
// y.Rows and the columns below cols. Like a cooperative loop's, its stores
// are ordered before any later access of the warp's other lanes.
func (b *Builder) TileStore(t *Tile, y TileOperand, cols Expr) {
	args := []Expr{y.Off, y.Stride, y.Rows, cols}
	switch {
	case y.Step != nil:
		b.fail("tile store %s: a Step (stores are row-major)", t.Name)
	case !b.check("tile store "+t.Name, args...):
	case y.Buf.Elem != F32:
		b.fail("tile store %s: into a %s buffer (want F32)", t.Name, y.Buf.Elem)
	case !allInt(args):
		b.fail("tile store %s: offsets, strides and bounds must be Int", t.Name)
	default:
		b.emit(&Stmt{Op: STileStore, Tile: t, Buf: y.Buf, Args: args})
	}
}

func tileElem(b *Buf) bool { return b.Elem == F32 || b.Elem == U16 }

func allInt(es []Expr) bool {
	for _, e := range es {
		if e.Kind != Int {
			return false
		}
	}
	return true
}

// HasTiles reports whether k uses tiles (a warp per ParallelFor iteration).
func HasTiles(ss []*Stmt) bool {
	return Any(ss, func(s *Stmt) bool { return s.Op == STile })
}

// tile interprets a tile statement.
func (m *machine) tile(s *Stmt) {
	t := s.Tile
	if s.Op == STile {
		if m.tiles == nil {
			m.tiles = map[*Tile][]float32{}
		}
		m.tiles[t] = make([]float32, t.Rows()*t.Cols())
		return
	}
	acc, ok := m.tiles[t]
	if !ok {
		fail("tile %s used before its declaration", t.Name)
	}
	ev := make([]int, len(s.Args))
	for i, a := range s.Args {
		ev[i] = int(m.eval(a).i)
	}
	if s.Op == STileStore {
		off, stride, rows, cols := ev[0], ev[1], ev[2], ev[3]
		for i := 0; i < min(rows, t.Rows()); i++ {
			for j := 0; j < min(cols, t.Cols()); j++ {
				m.store(s.Buf, off+i*stride+j, val{f: float64(acc[i*t.Cols()+j])})
			}
		}
		return
	}
	a := m.tileRows(s.Buf, ev[0], ev[1], ev[2], ev[3], t.Rows())
	c := m.tileRows(s.Buf2, ev[4], ev[5], ev[6], ev[7], t.Cols())
	for i := range t.Rows() {
		for j := range t.Cols() {
			sum := acc[i*t.Cols()+j]
			for k := range TileK {
				sum += float32(a[i*TileK+k] * c[j*TileK+k])
			}
			acc[i*t.Cols()+j] = sum
		}
	}
}

// tileRows reads n operand rows of TileK values step apart, rounded to f16.
func (m *machine) tileRows(b *Buf, off, stride, rows, step, n int) []float32 {
	if rows < 1 {
		fail("tile operand %s: %d rows", b.Name, rows)
	}
	if step == 1 && ((m.bufs[b.ID].off+off)%TileAlign != 0 || stride%TileAlign != 0) {
		fail("tile operand %s: offset %d, stride %d not multiples of %d", b.Name, m.bufs[b.ID].off+off, stride, TileAlign)
	}
	out := make([]float32, n*TileK)
	for i := range n {
		base := off + min(i, rows-1)*stride
		for k := range TileK {
			v := m.load(b, b.Elem, base+k*step)
			if b.Elem == U16 {
				out[i*TileK+k] = F16ToF32(uint16(v.i))
			} else {
				out[i*TileK+k] = F16ToF32(F32ToF16(float32(v.f)))
			}
		}
	}
	return out
}
