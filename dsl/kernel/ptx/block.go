package ptx

import (
	"strings"

	"github.com/jitllm/jitllm/dsl/kernel"
)

// Block products (dsl/kernel/block.go) as a pipelined CTA: the operands'
// next TileK columns are copied into shared memory while the warps
// multiply the ones before. A stage holds a's Rows() and c's Cols() rows
// of TileK f16 values, each row padded to stagePitch bytes so that the
// eight 16-byte rows one ldmatrix phase reads fall in distinct banks. f16
// operands travel with cp.async (global to shared, no registers); f32
// ones are loaded into registers a stage ahead and rounded to f16 as they
// are stored. Every thread copies whole 16-byte chunks: chunk c of a stage
// is row c/4, values 8·(c%4) onwards, and thread t copies chunks t, t+T, …
//
// A warp's fragments come from ldmatrix: a's x4 gives mma's a0..a3 (rows
// 0-15 at k 0 from lanes 0-15, at k 8 from lanes 16-31), c's x4 gives the
// b0 b1 pairs of two neighbouring 8-row pieces.
//
// With Target.WGMMA the CTA (four warps: one warpgroup) multiplies each
// stage with wgmma.mma_async, its operands read from shared memory through
// descriptors: a stage is then in wgmma's canonical K-major layout without
// swizzle, core matrices of 8 rows × 16 bytes (8 f16 at one k chunk), an
// 8-row group's TileK/8 chunks side by side (coreGroup bytes), the groups
// one after another. An instruction takes 64 of a's rows and all of c's
// (m64nNk16, N = c's rows), so each lane's sums are those of mma.m16n8
// pieces: warp w holds rows 16w.. of each 64-row half.

// stagePitch is a staged row's bytes: TileK f16 values and 16 of padding.
const stagePitch = 2*kernel.TileK + 16

// stageBudget is the dynamic shared memory a block product's stages may
// take: 96 KiB lets two CTAs share an SM on sm_80 and sm_90 and is under
// every sm_8x's limit a CTA.
const stageBudget = 96 << 10

// maxStages is the deepest pipeline: at 4 stages of 32 columns the copies
// of a stage are issued three stages' products ahead of their use.
const maxStages = 4

// coreGroup is an 8-row group's bytes in wgmma's layout: its TileK/8 core
// matrices of 8 rows × 16 bytes.
const coreGroup = 8 * 2 * kernel.TileK

// rowBytes is a staged row's share of a stage: padded for ldmatrix, or
// TileK f16 values in wgmma's layout (where whole 8-row groups start at a
// row's multiple of it).
func rowBytes(wgmma bool) int {
	if wgmma {
		return 2 * kernel.TileK
	}
	return stagePitch
}

// stageBytes is one stage of sh: its operands' rows.
func stageBytes(sh kernel.BlockShape, wgmma bool) int {
	return (sh.Rows() + sh.Cols()) * rowBytes(wgmma)
}

// blockStages is how many stages of sh fit the budget.
func blockStages(sh kernel.BlockShape, wgmma bool) int {
	return min(maxStages, stageBudget/stageBytes(sh, wgmma))
}

// blockShared is the dynamic shared memory of a kernel's block statements
// (their stages), 0 without.
func blockShared(body []*kernel.Stmt, wgmma bool) int {
	n := 0
	var walk func([]*kernel.Stmt)
	walk = func(ss []*kernel.Stmt) {
		for _, s := range ss {
			switch s.Op {
			case kernel.SBlockMatMul:
				n = max(n, blockStages(*s.Block, wgmma)*stageBytes(*s.Block, wgmma))
			case kernel.SBlockAttention:
				n = max(n, AttnShared(*s.Attn))
			}
			walk(s.Body)
		}
	}
	walk(body)
	return n
}

// blockOperand is one operand's copy plan: each thread's chunk pointers
// (64-bit global addresses at the current k) and, for f32 operands, the
// registers a chunk's 8 values wait in between load and store.
type blockOperand struct {
	buf    *kernel.Buf
	f32    bool
	ptrs   []string
	vals   [][8]string
	region int // the operand's byte offset within a stage
}

func (f *fn) blockStmt(s *kernel.Stmt) {
	sh := *s.Block
	nt, bm, bn := sh.Threads(), sh.Rows(), sh.Cols()
	if !f.blockCTA("block product", nt) {
		return
	}
	stage, ns, rb := stageBytes(sh, f.wgmma), blockStages(sh, f.wgmma), rowBytes(f.wgmma)
	if ns < 2 {
		f.fail("block product %v: two stages of %d bytes exceed shared memory", sh, stage)
		return
	}
	if f.wgmma && (nt != 128 || bm%64 != 0 || bn%8 != 0 || bn > 256) {
		f.fail("block product %v: wgmma takes one warpgroup (128 threads), 64-row multiples of a and up to 256 rows of c", sh)
		return
	}
	f.smem = true
	args := make([]string, len(s.Args))
	for i, a := range s.Args {
		args[i] = f.r64(a)
	}
	ab, cb, yb := f.buf(s.Buf), f.buf(s.Buf2), f.buf(s.Out)
	if ab == nil || cb == nil || yb == nil {
		return
	}

	tid, warp, l := f.ctaLanes()
	wm, wn := f.reg(c32), f.reg(c32)
	laneA, laneC, t := f.reg(c32), f.reg(c32), f.reg(c32)
	if !f.wgmma {
		f.ins("rem.u32 %s, %s, %d", wm, warp, sh.WM)
		f.ins("div.u32 %s, %s, %d", wn, warp, sh.WM)
		// ldmatrix lane offsets within a stage: a's row wm·16M + l%16 at k
		// 8·(l/16); c's row wn·8N + 8·(l/16) + l%8 at k 8·((l/8)&1)
		f.ins("and.b32 %s, %s, 15", t, l)
		f.ins("mad.lo.u32 %s, %s, %d, %s", laneA, wm, 16*sh.M, t)
		f.ins("mul.lo.u32 %s, %s, %d", laneA, laneA, stagePitch)
		f.ins("shr.u32 %s, %s, 4", t, l)
		f.ins("mad.lo.u32 %s, %s, 16, %s", laneA, t, laneA)
		f.ins("mul.lo.u32 %s, %s, 8", laneC, t)
		f.ins("mad.lo.u32 %s, %s, %d, %s", laneC, wn, 8*sh.N, laneC)
		f.ins("and.b32 %s, %s, 7", t, l)
		f.ins("add.u32 %s, %s, %s", laneC, laneC, t)
		f.ins("mad.lo.u32 %s, %s, %d, %d", laneC, laneC, stagePitch, bm*stagePitch)
		f.ins("bfe.u32 %s, %s, 3, 1", t, l)
		f.ins("mad.lo.u32 %s, %s, 16, %s", laneC, t, laneC)
	}
	// this thread's chunks: rows tid/4 + j·T/4, values 8·(tid%4)
	crow, cpart, laneW := f.reg(c64), f.reg(c64), f.reg(c32)
	f.ins("shr.u64 %s, %s, 2", crow, f.lane)
	f.ins("and.b64 %s, %s, 3", cpart, f.lane)
	f.ins("shl.b64 %s, %s, 3", cpart, cpart)
	f.ins("shr.u32 %s, %s, 2", laneW, tid)
	f.ins("and.b32 %s, %s, 3", t, tid)
	if f.wgmma {
		// row r = tid/4, chunk t: group r/8, core matrix t, its row r%8
		g := f.reg(c32)
		f.ins("shl.b32 %s, %s, 7", t, t)
		f.ins("and.b32 %s, %s, 7", g, laneW)
		f.ins("mad.lo.u32 %s, %s, 16, %s", t, g, t)
		f.ins("shr.u32 %s, %s, 3", laneW, laneW)
		f.ins("mad.lo.u32 %s, %s, %d, %s", laneW, laneW, coreGroup, t)
	} else {
		f.ins("shl.b32 %s, %s, 4", t, t)
		f.ins("mad.lo.u32 %s, %s, %d, %s", laneW, laneW, stagePitch, t)
	}
	ops := []*blockOperand{
		f.blockOperand(s.Buf, ab, args[0:3], bm, nt, crow, cpart, 0),
		f.blockOperand(s.Buf2, cb, args[3:6], bn, nt, crow, cpart, bm*rb),
	}
	nk := f.reg(c64)
	f.ins("shr.s64 %s, %s, %d", nk, args[6], log2(kernel.TileK))

	mp, np := sh.M, sh.N // the sums' m16n8 pieces a lane: by (m, n)
	if f.wgmma {
		mp, np = bm/64, bn/8
	}
	acc := f.zeroTiles(mp * np)
	smem := f.reg(c32)
	f.ins("mov.u32 %s, %s", smem, f.smemName())
	wbase := f.reg(c32)
	f.ins("add.u32 %s, %s, %s", wbase, smem, laneW)
	// prologue: stages 0..ns−2, the f32 operand's stored at once
	p := f.reg(cPred)
	for st := range ns - 1 {
		skip := f.label()
		f.ins("setp.le.s64 %s, %s, %d", p, nk, st)
		f.ins("@%s bra %s", p, skip)
		for _, o := range ops {
			f.blockCopy(o, wbase, st*stage, nt)
			if o.f32 {
				f.blockStore(o, wbase, st*stage, nt)
			}
		}
		f.place(skip)
		f.ins("cp.async.commit_group")
	}

	rbase, wb, rend, wend := f.reg(c32), f.reg(c32), f.reg(c32), f.reg(c32)
	f.ins("mov.u32 %s, %s", rbase, smem)
	f.ins("add.u32 %s, %s, %d", wb, wbase, (ns-1)*stage)
	f.ins("add.u32 %s, %s, %d", rend, smem, ns*stage)
	f.ins("add.u32 %s, %s, %d", wend, wbase, ns*stage)
	kb, ki := f.reg(c64), f.reg(c64)
	f.ins("mov.b64 %s, 0", kb)
	f.ins("mov.b64 %s, %d", ki, ns-1)
	top, done, noIssue, noStore := f.label(), f.label(), f.label(), f.label()
	f.place(top)
	f.ins("setp.ge.s64 %s, %s, %s", p, kb, nk)
	f.ins("@%s bra %s", p, done)
	// stage kb has landed (this thread's copies; the barrier makes them
	// everyone's) and every warp is done with the stage about to be refilled
	f.ins("cp.async.wait_group %d", ns-2)
	if f.wgmma {
		// wgmma reads through the async proxy: order this thread's
		// writes (cp.async, st.shared) before it
		f.ins("fence.proxy.async.shared::cta")
	}
	f.ins("bar.sync 0")
	issue := f.reg(cPred)
	f.ins("setp.lt.s64 %s, %s, %s", issue, ki, nk)
	copies := func() {
		f.ins("@!%s bra %s", issue, noIssue)
		for _, o := range ops {
			f.blockCopy(o, wb, 0, nt)
		}
		f.place(noIssue)
		f.ins("cp.async.commit_group")
	}
	switch {
	case f.overlap:
		// the stage refilled next is the one the products before these
		// read: wait for those (one group left in flight), then copy
		f.wgmmaProducts(acc, rbase, bm, bn, 1)
		copies()
	case f.wgmma:
		copies()
		f.wgmmaProducts(acc, rbase, bm, bn, 0)
	default:
		copies()
		f.blockProducts(sh, acc, rbase, laneA, laneC)
	}
	if ops[0].f32 || ops[1].f32 {
		f.ins("@!%s bra %s", issue, noStore)
		for _, o := range ops {
			if o.f32 {
				f.blockStore(o, wb, 0, nt)
			}
		}
		f.place(noStore)
	}
	f.blockNext(rbase, stage, ns, rend)
	f.blockNext(wb, stage, ns, wend)
	f.ins("add.s64 %s, %s, 1", kb, kb)
	f.ins("add.s64 %s, %s, 1", ki, ki)
	f.ins("bra %s", top)
	f.place(done)
	if f.overlap {
		f.ins("wgmma.wait_group.sync.aligned 0") // the last stage's products
	}
	f.ins("cp.async.wait_group 0")
	f.ins("bar.sync 0") // the next grid iteration's copies may refill any stage
	// this warp's first row and column of the sums
	r0, c0 := f.reg(c32), f.reg(c32)
	mstride := 16
	if f.wgmma {
		f.ins("shl.b32 %s, %s, 4", r0, warp)
		f.ins("mov.u32 %s, 0", c0)
		mstride = 64
	} else {
		f.ins("mul.lo.u32 %s, %s, %d", r0, wm, 16*sh.M)
		f.ins("mul.lo.u32 %s, %s, %d", c0, wn, 8*sh.N)
	}
	f.blockEpilogue(acc, mp, np, mstride, args[7:11], yb, r0, c0, l)
}

// wgmmaProducts multiplies the stage at base into the sums with the
// warpgroup's MMA: for each 16-wide k step, a 64-row half of a by all of
// c's rows an instruction, then waits until at most inFlight groups of
// them are pending (0: these are done).
func (f *fn) wgmmaProducts(acc tileRegs, base string, bm, bn, inFlight int) {
	// descriptor: start address/16 in bits 0-13, the k neighbour's offset
	// (LBO, one core matrix: 128 bytes)/16 at 16, the next 8-row group's
	// (SBO)/16 at 32, no swizzle
	desc := f.reg(c64)
	a := f.reg(c32)
	f.ins("bfe.u32 %s, %s, 4, 14", a, base)
	f.ins("cvt.u64.u32 %s, %s", desc, a)
	f.ins("or.b64 %s, %s, %d", desc, desc, (128>>4)<<16|(coreGroup>>4)<<32)
	scale := f.reg(cPred)
	f.ins("setp.eq.u32 %s, 1, 1", scale) // D = A·B + D
	f.ins("wgmma.fence.sync.aligned")
	np := bn / 8
	for ks := range kernel.TileK / 16 {
		dc := f.reg(c64)
		f.ins("add.s64 %s, %s, %d", dc, desc, (bm*rowBytes(true)+ks*256)>>4)
		for mh := range bm / 64 {
			da := f.reg(c64)
			f.ins("add.s64 %s, %s, %d", da, desc, (mh*64*rowBytes(true)+ks*256)>>4)
			var d []string
			for _, piece := range acc[mh*np : (mh+1)*np] {
				d = append(d, piece[:]...)
			}
			f.ins("wgmma.mma_async.sync.aligned.m64n%dk16.f32.f16.f16 {%s}, %s, %s, %s, 1, 1, 0, 0", bn, strings.Join(d, ", "), da, dc, scale)
		}
	}
	f.ins("wgmma.commit_group.sync.aligned")
	f.ins("wgmma.wait_group.sync.aligned %d", inFlight)
}

// blockCTA reports whether a block statement of nt threads can render
// here: on sm_80 or later (cp.async, mma.m16n8k16), in a grid iteration
// run by its CTA.
func (f *fn) blockCTA(what string, nt int) bool {
	switch {
	case f.sm < 80:
		f.fail("%s: cp.async and mma.m16n8k16 need sm_80 or later", what)
		return false
	case f.width != nt || f.lane == "":
		f.fail("%s: outside a grid iteration of its CTA of %d", what, nt)
		return false
	}
	return true
}

// ctaLanes is this thread's index in its CTA (a block statement's group
// is the CTA), its warp and its lane in the warp, 32-bit.
func (f *fn) ctaLanes() (tid, warp, l string) {
	tid, warp, l = f.reg(c32), f.reg(c32), f.reg(c32)
	f.ins("cvt.u32.u64 %s, %s", tid, f.lane)
	f.ins("shr.u32 %s, %s, 5", warp, tid)
	f.ins("and.b32 %s, %s, 31", l, tid)
	return tid, warp, l
}

// smemName is the kernel's staging buffer in shared memory: the CTA's
// dynamic shared memory (Launch.Shared bytes).
func (f *fn) smemName() string { return "stage_" + paramName(0, f.entry) }

// blockOperand computes each of this thread's chunk pointers at k = 0:
// row min(crow + j·T/4, rows−1) of op (off, stride, rows), values cpart on.
func (f *fn) blockOperand(buf *kernel.Buf, b *bufReg, op []string, rows, nt int, crow, cpart string, region int) *blockOperand {
	o := &blockOperand{buf: buf, f32: buf.Elem == kernel.F32, region: region}
	last := f.reg(c64)
	f.ins("add.s64 %s, %s, -1", last, op[2])
	for j := range rows * 4 / nt {
		r, ptr := f.reg(c64), f.reg(c64)
		f.ins("add.s64 %s, %s, %d", r, crow, j*nt/4)
		f.ins("min.s64 %s, %s, %s", r, r, last)
		f.ins("mad.lo.s64 %s, %s, %s, %s", r, r, op[1], op[0])
		f.ins("add.s64 %s, %s, %s", r, r, cpart)
		f.ins("shl.b64 %s, %s, %d", r, r, log2(buf.Elem.Bytes()))
		f.ins("add.s64 %s, %s, %s", ptr, b.addr, r)
		o.ptrs = append(o.ptrs, ptr)
		if o.f32 {
			var v [8]string
			for i := range v {
				v[i] = f.reg(cF32)
			}
			o.vals = append(o.vals, v)
		}
	}
	return o
}

// blockCopy starts the copy of o's next TileK columns into the stage at
// base+off (base holds the thread's chunk offset), advancing its pointers:
// cp.async for f16, loads into o.vals for f32.
func (f *fn) blockCopy(o *blockOperand, base string, off, nt int) {
	for j, ptr := range o.ptrs {
		dst := off + o.region + j*(nt/4)*rowBytes(f.wgmma)
		if o.f32 {
			f.ins("ld.global.v4.f32 {%s}, [%s]", strings.Join(o.vals[j][:4], ", "), ptr)
			f.ins("ld.global.v4.f32 {%s}, [%s+16]", strings.Join(o.vals[j][4:], ", "), ptr)
		} else {
			f.ins("cp.async.cg.shared.global [%s+%d], [%s], 16", base, dst, ptr)
		}
		f.ins("add.s64 %s, %s, %d", ptr, ptr, kernel.TileK*o.buf.Elem.Bytes())
	}
}

// blockStore rounds an f32 operand's loaded chunks to f16 pairs (lower k
// in the low half) and stores them into the stage at base+off.
func (f *fn) blockStore(o *blockOperand, base string, off, nt int) {
	for j, v := range o.vals {
		var h [4]string
		for i := range h {
			h[i] = f.reg(c32)
			f.ins("cvt.rn.f16x2.f32 %s, %s, %s", h[i], v[2*i+1], v[2*i])
		}
		f.ins("st.shared.v4.b32 [%s+%d], {%s}", base, off+o.region+j*(nt/4)*rowBytes(f.wgmma), strings.Join(h[:], ", "))
	}
}

// blockProducts multiplies the stage at rb into the sums: two k steps of
// 16, each loading the warp's fragments and issuing its M×N mma.
func (f *fn) blockProducts(sh kernel.BlockShape, acc tileRegs, rb, laneA, laneC string) {
	ra, rc := f.reg(c32), f.reg(c32)
	f.ins("add.u32 %s, %s, %s", ra, rb, laneA)
	f.ins("add.u32 %s, %s, %s", rc, rb, laneC)
	for ks := range kernel.TileK / 16 {
		a := make([][4]string, sh.M)
		for m := range a {
			a[m] = f.ldmatrix(false, ra, 16*m*stagePitch+32*ks)
		}
		c := make([][4]string, sh.N/2)
		for n := range c {
			c[n] = f.ldmatrix(false, rc, 16*n*stagePitch+32*ks)
		}
		for m := range sh.M {
			for n := range sh.N {
				f.mma(acc[m*sh.N+n], a[m], c[n/2][2*(n%2)], c[n/2][2*(n%2)+1])
			}
		}
	}
}

// blockNext advances a stage pointer by one of ns stages, wrapping back
// by all of them on reaching end.
func (f *fn) blockNext(r string, stage, ns int, end string) {
	p := f.reg(cPred)
	f.ins("add.u32 %s, %s, %d", r, r, stage)
	f.ins("setp.ge.u32 %s, %s, %s", p, r, end)
	f.ins("@%s sub.u32 %s, %s, %d", p, r, r, ns*stage)
}

// blockEpilogue stores each lane's sums under the bounds: piece (m, n)
// of mp×np, sum e, is row r0 + mstride·m + g + 8·(e/2), column c0 + 8n +
// 2t + e%2 (g = l/4, t = l%4; r0, c0 the warp's first row and column);
// then the CTA's barrier.
func (f *fn) blockEpilogue(acc tileRegs, mp, np, mstride int, y []string, yb *bufReg, r0, c0, l string) {
	off, stride, rows, cols := y[0], y[1], y[2], y[3]
	row0, col0, t := f.reg(c64), f.reg(c64), f.reg(c64)
	w := f.reg(c32)
	f.ins("shr.u32 %s, %s, 2", w, l)
	f.ins("add.u32 %s, %s, %s", w, r0, w)
	f.ins("cvt.u64.u32 %s, %s", row0, w)
	f.ins("and.b32 %s, %s, 3", w, l)
	f.ins("shl.b32 %s, %s, 1", w, w)
	f.ins("add.u32 %s, %s, %s", w, c0, w)
	f.ins("cvt.u64.u32 %s, %s", col0, w)
	colOK := make([]string, 2*np)
	for i := range colOK {
		colOK[i] = f.reg(cPred)
		f.ins("add.s64 %s, %s, %d", t, col0, 8*(i/2)+i%2)
		f.ins("setp.lt.s64 %s, %s, %s", colOK[i], t, cols)
	}
	for m := range mp {
		for h := range 2 {
			row, addr := f.reg(c64), f.reg(c64)
			rowOK := f.reg(cPred)
			f.ins("add.s64 %s, %s, %d", row, row0, mstride*m+8*h)
			f.ins("setp.lt.s64 %s, %s, %s", rowOK, row, rows)
			f.ins("mad.lo.s64 %s, %s, %s, %s", addr, row, stride, off)
			f.ins("add.s64 %s, %s, %s", addr, addr, col0)
			f.ins("shl.b64 %s, %s, 2", addr, addr)
			f.ins("add.s64 %s, %s, %s", addr, yb.addr, addr)
			for n := range np {
				for e := range 2 {
					ok := f.reg(cPred)
					f.ins("and.pred %s, %s, %s", ok, rowOK, colOK[2*n+e])
					f.ins("@%s st.global.f32 [%s+%d], %s", ok, addr, 4*(8*n+e), acc[m*np+n][2*h+e])
				}
			}
		}
	}
	f.ins("bar.sync 0") // the other threads may read these sums next
}
