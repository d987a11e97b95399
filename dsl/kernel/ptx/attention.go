package ptx

import "github.com/jitllm/jitllm/dsl/kernel"

// Block attentions (dsl/kernel/attention.go) as flash attention: the CTA
// copies each block of AttnBlock key and value rows into shared memory
// with cp.async (two stages: the next block's copies run under this one's
// products), its rows padded to attnPitch bytes so that ldmatrix reads no
// bank twice. A warp holds its 16 query rows as mma A fragments for the
// whole walk; a block's scores are 8 mma tiles of 16×8 (K's fragments from
// ldmatrix, like a block product's c), masked causally, scaled to base 2;
// lane (g, t) holds rows g and g+8 of every tile, so a row's maximum and
// sum are the lane's values combined over the quad (shfl.bfly 1, 2). The
// weights, rounded to f16, are already the A fragments of the product
// with V (tiles 2k and 2k+1 are k step k's a0 a1 and a2 a3), whose B
// fragments come from ldmatrix.trans of V's row-major rows.

// attnPitch is a staged cache row's bytes: hd f16 values and 16 of padding.
func attnPitch(sh kernel.AttnShape) int { return 2*sh.HD + 16 }

// AttnShared is a block attention's dynamic shared memory: two stages of a
// key and a value block, a split's for each warp (the warps' partial
// results, which fold at the end, take less).
func AttnShared(sh kernel.AttnShape) int {
	n := 2 * 2 * kernel.AttnBlock * attnPitch(sh)
	if sh.Split {
		n *= sh.Warps
	}
	return n
}

func (f *fn) attnStmt(s *kernel.Stmt) {
	sh := *s.Attn
	nt, hd, pitch := sh.Threads(), sh.HD, attnPitch(sh)
	// a split's warps (kernel.AttnShape.Split) each walk every Warps-th
	// block with stages of their own, copied by their own lanes
	split, stride := sh.Split && sh.Warps > 1, 1
	copiers := nt
	if split {
		stride, copiers = sh.Warps, 32
	}
	if !f.blockCTA("block attention", nt) {
		return
	}
	f.smem = true
	blockBytes := kernel.AttnBlock * pitch
	stage := 2 * blockBytes
	// Args: ten Ints, the scale, then the Q8_0 output's four Ints
	args := make([]string, 10)
	for i, a := range s.Args[:10] {
		args[i] = f.r64(a)
	}
	scale := f.reg(cF32)
	f.ins("mul.f32 %s, %s, 0f3FB8AA3B", scale, f.expr(s.Args[10])) // log2 e
	var qargs, span []string                                       // the Q8_0 output's Ints, or a partial's range
	for _, a := range s.Args[11:] {
		if s.Part {
			span = append(span, f.r64(a))
		} else {
			qargs = append(qargs, f.r64(a))
		}
	}
	qb, kb, vb, yb := f.buf(s.Buf), f.buf(s.Buf2), f.buf(s.Buf3), f.buf(s.Out)
	if qb == nil || kb == nil || vb == nil || yb == nil {
		return
	}
	qOff, qStride, qRows, kOff, kStride, vOff, vStride, yOff, yStride, first := args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8], args[9]

	tid, warp, l := f.ctaLanes()
	g, t4 := f.reg(c32), f.reg(c32)
	f.ins("shr.u32 %s, %s, 2", g, l)
	f.ins("and.b32 %s, %s, 3", t4, l)
	// the lane's rows ra = 16·warp + g and rb = ra + 8; their query rows
	// clamped to the last, their positions' bound first + row
	rows := f.reg(c64)
	f.ins("min.s64 %s, %s, %d", rows, qRows, sh.Rows())
	ra := f.reg(c64)
	w := f.reg(c32)
	if split { // the warps share the rows
		f.ins("mov.u32 %s, %s", w, g)
	} else {
		f.ins("mad.lo.u32 %s, %s, 16, %s", w, warp, g)
	}
	f.ins("cvt.u64.u32 %s, %s", ra, w)
	rb := f.reg(c64)
	f.ins("add.s64 %s, %s, 8", rb, ra)
	limA, limB, first32 := f.reg(c32), f.reg(c32), f.reg(c32)
	f.ins("cvt.u32.u64 %s, %s", first32, first)
	if sh.Heads { // one position's heads: every row's bound is first
		f.ins("mov.u32 %s, %s", limA, first32)
		f.ins("mov.u32 %s, %s", limB, first32)
	} else {
		f.ins("add.u32 %s, %s, %s", limA, first32, w)
		f.ins("add.u32 %s, %s, 8", limB, limA)
	}
	// a partial's range: blocks from lo's, positions below hi
	jb0, hi32 := "0", ""
	if s.Part {
		jb0, hi32 = f.reg(c32), f.reg(c32)
		f.ins("cvt.u32.u64 %s, %s", jb0, span[0])
		f.ins("shr.u32 %s, %s, %d", jb0, jb0, log2(kernel.AttnBlock))
		f.ins("cvt.u32.u64 %s, %s", hi32, span[1])
		f.ins("min.u32 %s, %s, %s", limA, limA, hi32)
		f.ins("min.u32 %s, %s, %s", limB, limB, hi32)
	}
	// the query's A fragments: k step ks's a0 a1 a2 a3 are rows ra, rb at
	// 16ks + 2t and rows ra, rb at 16ks + 8 + 2t
	qa := make([][4]string, hd/16)
	last := f.reg(c64)
	f.ins("add.s64 %s, %s, -1", last, qRows)
	var qrow [2]string
	for h, r := range []string{ra, rb} {
		row := f.reg(c64)
		f.ins("min.s64 %s, %s, %s", row, r, last)
		f.ins("mad.lo.s64 %s, %s, %s, %s", row, row, qStride, qOff)
		t := f.reg(c64)
		f.ins("cvt.u64.u32 %s, %s", t, t4)
		f.ins("shl.b64 %s, %s, 1", t, t)
		f.ins("add.s64 %s, %s, %s", row, row, t)
		f.ins("shl.b64 %s, %s, %d", row, row, log2(s.Buf.Elem.Bytes()))
		qrow[h] = f.reg(c64)
		f.ins("add.s64 %s, %s, %s", qrow[h], qb.addr, row)
	}
	eb := s.Buf.Elem.Bytes()
	for ks := range qa {
		for i := range qa[ks] {
			qa[ks][i] = f.reg(c32)
			off := (16*ks + 8*(i/2)) * eb
			if s.Buf.Elem == kernel.U16 {
				f.ins("ld.global.b32 %s, [%s+%d]", qa[ks][i], qrow[i%2], off)
				continue
			}
			x0, x1 := f.reg(cF32), f.reg(cF32)
			f.ins("ld.global.v2.f32 {%s, %s}, [%s+%d]", x0, x1, qrow[i%2], off)
			f.ins("cvt.rn.f16x2.f32 %s, %s, %s", qa[ks][i], x1, x0)
		}
	}
	// the blocks: up to the one holding the last row's last position
	nb := f.reg(c32)
	if sh.Heads {
		f.ins("add.u32 %s, %s, %d", nb, first32, kernel.AttnBlock-1)
	} else {
		f.ins("cvt.u32.u64 %s, %s", nb, rows)
		f.ins("add.u32 %s, %s, %s", nb, nb, first32)
		f.ins("add.u32 %s, %s, %d", nb, nb, kernel.AttnBlock-2)
	}
	f.ins("shr.u32 %s, %s, %d", nb, nb, log2(kernel.AttnBlock))
	if s.Part {
		hb := f.reg(c32)
		f.ins("add.u32 %s, %s, %d", hb, hi32, kernel.AttnBlock-1)
		f.ins("shr.u32 %s, %s, %d", hb, hb, log2(kernel.AttnBlock))
		f.ins("min.u32 %s, %s, %s", nb, nb, hb)
	}

	// copies: thread tid (a split's lane) takes chunk tid%cpr of rows
	// tid/cpr + pass·(T/cpr)
	cpr := hd / 8
	pass := copiers / cpr
	ct := tid
	if split {
		ct = l
	}
	crow, cpart := f.reg(c32), f.reg(c32)
	f.ins("shr.u32 %s, %s, %d", crow, ct, log2(cpr))
	f.ins("and.b32 %s, %s, %d", cpart, ct, cpr-1)
	laneW := f.reg(c32)
	f.ins("shl.b32 %s, %s, 4", laneW, cpart)
	f.ins("mad.lo.u32 %s, %s, %d, %s", laneW, crow, pitch, laneW)
	type cacheCopy struct {
		ptr, passBytes, blockBytes string
		region                     int
	}
	copies := make([]cacheCopy, 2)
	for i, c := range []struct {
		b           *bufReg
		off, stride string
	}{{kb, kOff, kStride}, {vb, vOff, vStride}} {
		cc := cacheCopy{ptr: f.reg(c64), passBytes: f.reg(c64), blockBytes: f.reg(c64), region: i * blockBytes}
		r, t := f.reg(c64), f.reg(c64)
		f.ins("cvt.u64.u32 %s, %s", r, crow)
		f.ins("cvt.u64.u32 %s, %s", t, cpart)
		f.ins("shl.b64 %s, %s, 3", t, t)
		f.ins("mad.lo.s64 %s, %s, %s, %s", r, r, c.stride, c.off)
		f.ins("add.s64 %s, %s, %s", r, r, t)
		f.ins("shl.b64 %s, %s, 1", r, r)
		f.ins("add.s64 %s, %s, %s", cc.ptr, c.b.addr, r)
		f.ins("mul.lo.s64 %s, %s, %d", cc.passBytes, c.stride, 2*pass)
		f.ins("mul.lo.s64 %s, %s, %d", cc.blockBytes, c.stride, 2*kernel.AttnBlock*stride)
		if split { // from the warp's first block
			w64 := f.reg(c64)
			f.ins("cvt.u64.u32 %s, %s", w64, warp)
			f.ins("mul.lo.s64 %s, %s, %d", w64, w64, 2*kernel.AttnBlock)
			f.ins("mad.lo.s64 %s, %s, %s, %s", cc.ptr, w64, c.stride, cc.ptr)
		}
		if s.Part { // from the range's first block
			b0 := f.reg(c64)
			f.ins("cvt.u64.u32 %s, %s", b0, jb0)
			f.ins("mad.lo.s64 %s, %s, %s, %s", cc.ptr, b0, cc.blockBytes, cc.ptr)
		}
		copies[i] = cc
	}
	// copyBlock copies the block at the pointers into the stage at dst and
	// advances the pointers a block
	copyBlock := func(dst string) {
		for _, cc := range copies {
			p := f.reg(c64)
			f.ins("mov.b64 %s, %s", p, cc.ptr)
			for j := range kernel.AttnBlock / pass {
				if j > 0 {
					f.ins("add.s64 %s, %s, %s", p, p, cc.passBytes)
				}
				f.ins("cp.async.cg.shared.global [%s+%d], [%s], 16", dst, cc.region+j*pass*pitch, p)
			}
			f.ins("add.s64 %s, %s, %s", cc.ptr, cc.ptr, cc.blockBytes)
		}
	}
	// ldmatrix lane offsets: K's rows 8·(l/16) + l%8 at 8·((l/8)&1); V's
	// (transposed) rows 8·((l/8)&1) + l%8 at 8·(l/16)
	laneK, laneV, t := f.reg(c32), f.reg(c32), f.reg(c32)
	f.ins("shr.u32 %s, %s, 4", t, l)
	f.ins("shl.b32 %s, %s, 3", laneK, t)
	f.ins("shl.b32 %s, %s, 4", laneV, t)
	f.ins("and.b32 %s, %s, 7", t, l)
	f.ins("add.u32 %s, %s, %s", laneK, laneK, t)
	f.ins("mul.lo.u32 %s, %s, %d", laneK, laneK, pitch)
	f.ins("bfe.u32 %s, %s, 3, 1", t, l)
	f.ins("mad.lo.u32 %s, %s, 16, %s", laneK, t, laneK)
	f.ins("shl.b32 %s, %s, 3", t, t)
	w8 := f.reg(c32)
	f.ins("and.b32 %s, %s, 7", w8, l)
	f.ins("add.u32 %s, %s, %s", t, t, w8)
	f.ins("mad.lo.u32 %s, %s, %d, %s", laneV, t, pitch, laneV)
	f.ins("add.u32 %s, %s, %d", laneV, laneV, blockBytes)

	// the rows' state: maxima, sums (the lane's share), output tiles
	mA, mB, lA, lB := f.reg(cF32), f.reg(cF32), f.reg(cF32), f.reg(cF32)
	f.ins("mov.f32 %s, 0fFF800000", mA)
	f.ins("mov.f32 %s, 0fFF800000", mB)
	f.ins("mov.f32 %s, 0f00000000", lA)
	f.ins("mov.f32 %s, 0f00000000", lB)
	o := f.zeroTiles(hd / 8)
	smem := f.reg(c32)
	f.ins("mov.u32 %s, %s", smem, f.smemName())
	base := smem // the stages: the CTA's, or the warp's in a split
	if split {
		base = f.reg(c32)
		f.ins("mad.lo.u32 %s, %s, %d, %s", base, warp, 2*stage, smem)
	}
	wbase := f.reg(c32)
	f.ins("add.u32 %s, %s, %s", wbase, base, laneW)
	p := f.reg(cPred)
	jb := f.reg(c32)
	par := "" // a split's stage: its iterations' parity
	switch {
	case split:
		// the warp's first block, none past the last
		f.ins("mov.u32 %s, %s", jb, warp)
		par = f.reg(c32)
		f.ins("mov.u32 %s, 0", par)
		none := f.label()
		f.ins("setp.ge.u32 %s, %s, %s", p, jb, nb)
		f.ins("@%s bra %s", p, none)
		copyBlock(wbase)
		f.place(none)
	case s.Part:
		// the first block into its stage (jb0's parity), none for an
		// empty range
		empty, first := f.label(), f.reg(c32)
		f.ins("setp.ge.u32 %s, %s, %s", p, jb0, nb)
		f.ins("@%s bra %s", p, empty)
		f.ins("and.b32 %s, %s, 1", first, jb0)
		f.ins("mad.lo.u32 %s, %s, %d, %s", first, first, stage, wbase)
		copyBlock(first)
		f.place(empty)
		f.ins("mov.u32 %s, %s", jb, jb0)
	default:
		copyBlock(wbase)
		f.ins("mov.u32 %s, %s", jb, jb0)
	}
	f.ins("cp.async.commit_group")

	top, done, noCopy := f.label(), f.label(), f.label()
	f.place(top)
	f.ins("setp.ge.u32 %s, %s, %s", p, jb, nb)
	f.ins("@%s bra %s", p, done)
	// block jb has landed and every warp (a split's: every lane) is done
	// with the other stage
	f.ins("cp.async.wait_group 0")
	cur, next := f.reg(c32), f.reg(c32)
	if split {
		f.ins("bar.warp.sync -1")
		f.ins("mov.u32 %s, %s", t, par)
		f.ins("xor.b32 %s, %s, 1", par, par)
	} else {
		f.ins("bar.sync 0")
		f.ins("and.b32 %s, %s, 1", t, jb)
	}
	f.ins("mad.lo.u32 %s, %s, %d, %s", cur, t, stage, base)
	f.ins("xor.b32 %s, %s, 1", t, t)
	f.ins("mad.lo.u32 %s, %s, %d, %s", next, t, stage, wbase)
	f.ins("add.u32 %s, %s, %d", t, jb, stride)
	f.ins("setp.ge.u32 %s, %s, %s", p, t, nb)
	f.ins("@%s bra %s", p, noCopy)
	copyBlock(next)
	f.place(noCopy)
	f.ins("cp.async.commit_group")

	// scores: 8 tiles of 16 rows × 8 positions
	nst := kernel.AttnBlock / 8
	sc := f.zeroTiles(nst)
	ka := f.reg(c32)
	f.ins("add.u32 %s, %s, %s", ka, cur, laneK)
	for ks := range hd / 16 {
		for pr := range nst / 2 {
			bf := f.ldmatrix(false, ka, 16*pr*pitch+32*ks)
			f.mma(sc[2*pr], qa[ks], bf[0], bf[1])
			f.mma(sc[2*pr+1], qa[ks], bf[2], bf[3])
		}
	}
	// the causal mask and the scale: position j0 + 8n + 2t + e%2 of row
	// ra (e < 2) or rb
	col := f.reg(c32)
	f.ins("shl.b32 %s, %s, %d", col, jb, log2(kernel.AttnBlock))
	f.ins("mad.lo.u32 %s, %s, 2, %s", col, t4, col)
	mx := [2]string{f.reg(cF32), f.reg(cF32)}
	f.ins("mov.f32 %s, 0fFF800000", mx[0])
	f.ins("mov.f32 %s, 0fFF800000", mx[1])
	for n := range sc {
		for e := range 4 {
			c, ok := f.reg(c32), f.reg(cPred)
			f.ins("add.u32 %s, %s, %d", c, col, 8*n+e%2)
			f.ins("setp.lt.u32 %s, %s, %s", ok, c, []string{limA, limB}[e/2])
			f.ins("mul.f32 %s, %s, %s", sc[n][e], sc[n][e], scale)
			f.ins("selp.f32 %s, %s, 0fFF800000, %s", sc[n][e], sc[n][e], ok)
			f.ins("max.f32 %s, %s, %s", mx[e/2], mx[e/2], sc[n][e])
		}
	}
	alpha := [2]string{f.reg(cF32), f.reg(cF32)}
	sum := [2]string{f.reg(cF32), f.reg(cF32)}
	for h, m := range []string{mA, mB} {
		f.quadFold("max.f32", mx[h])
		f.ins("max.f32 %s, %s, %s", mx[h], mx[h], m)
		newM := mx[h]
		if s.Part {
			// a row with no position in the range yet keeps m = −Inf, its
			// weights taken against 0 (0, not exp(−Inf + Inf))
			none := f.reg(cPred)
			newM = f.reg(cF32)
			f.ins("mov.f32 %s, %s", newM, mx[h])
			f.ins("setp.eq.f32 %s, %s, 0fFF800000", none, mx[h])
			f.ins("selp.f32 %s, 0f00000000, %s, %s", mx[h], mx[h], none)
		}
		f.ins("sub.f32 %s, %s, %s", alpha[h], m, mx[h])
		f.ins("ex2.approx.ftz.f32 %s, %s", alpha[h], alpha[h])
		f.ins("mov.f32 %s, %s", m, newM)
		f.ins("mov.f32 %s, 0f00000000", sum[h])
	}
	for n := range sc {
		for e := range 4 {
			f.ins("sub.f32 %s, %s, %s", sc[n][e], sc[n][e], mx[e/2])
			f.ins("ex2.approx.ftz.f32 %s, %s", sc[n][e], sc[n][e])
			f.ins("add.f32 %s, %s, %s", sum[e/2], sum[e/2], sc[n][e])
		}
	}
	f.ins("fma.rn.f32 %s, %s, %s, %s", lA, lA, alpha[0], sum[0])
	f.ins("fma.rn.f32 %s, %s, %s, %s", lB, lB, alpha[1], sum[1])
	for n := range o {
		for e := range 4 {
			f.ins("mul.f32 %s, %s, %s", o[n][e], o[n][e], alpha[e/2])
		}
	}
	// the weights as f16 A fragments, then times V
	va := f.reg(c32)
	f.ins("add.u32 %s, %s, %s", va, cur, laneV)
	for kk := range nst / 2 {
		var pa [4]string
		for i := range pa {
			pa[i] = f.reg(c32)
			tile := sc[2*kk+i/2]
			e := 2 * (i % 2)
			f.ins("cvt.rn.f16x2.f32 %s, %s, %s", pa[i], tile[e+1], tile[e])
		}
		for pr := range hd / 16 {
			bf := f.ldmatrix(true, va, 16*kk*pitch+32*pr)
			f.mma(o[2*pr], pa, bf[0], bf[1])
			f.mma(o[2*pr+1], pa, bf[2], bf[3])
		}
	}
	f.ins("add.u32 %s, %s, %d", jb, jb, stride)
	f.ins("bra %s", top)
	f.place(done)
	f.ins("bar.sync 0") // the next grid iteration's copies may refill either stage
	skip := ""
	if split {
		skip = f.label()
		f.attnFold(sh, warp, l, smem, []string{mA, mB, lA, lB}, o, skip)
	}

	// the rows' sums over their quads, the outputs divided by them (a
	// partial's left as they are, its maxima back in natural units)
	for _, lsum := range []string{lA, lB} {
		f.quadFold("add.f32", lsum)
		if !s.Part {
			f.ins("rcp.rn.f32 %s, %s", lsum, lsum)
		}
	}
	for h, r := range []string{ra, rb} {
		ok, addr, tc := f.reg(cPred), f.reg(c64), f.reg(c64)
		f.ins("setp.lt.s64 %s, %s, %s", ok, r, rows)
		f.ins("mad.lo.s64 %s, %s, %s, %s", addr, r, yStride, yOff)
		f.ins("cvt.u64.u32 %s, %s", tc, t4)
		f.ins("shl.b64 %s, %s, 1", tc, tc)
		f.ins("add.s64 %s, %s, %s", addr, addr, tc)
		f.ins("shl.b64 %s, %s, 2", addr, addr)
		f.ins("add.s64 %s, %s, %s", addr, yb.addr, addr)
		inv := []string{lA, lB}[h]
		if s.Part {
			for n := range o {
				f.ins("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, addr, 32*n, o[n][2*h], o[n][2*h+1])
			}
			// lane t = 0 of the quad stores the row's m and l after its values
			mn, q0 := f.reg(cF32), f.reg(cPred)
			f.ins("mul.f32 %s, %s, 0f3F317218", mn, []string{mA, mB}[h]) // ln 2
			f.ins("setp.eq.and.u32 %s, %s, 0, %s", q0, t4, ok)
			f.ins("@%s st.global.v2.f32 [%s+%d], {%s, %s}", q0, addr, 4*hd, mn, inv)
			continue
		}
		vals := make([][2]string, len(o))
		for n := range o {
			x0, x1 := f.reg(cF32), f.reg(cF32)
			f.ins("mul.f32 %s, %s, %s", x0, o[n][2*h], inv)
			f.ins("mul.f32 %s, %s, %s", x1, o[n][2*h+1], inv)
			f.ins("@%s st.global.v2.f32 [%s+%d], {%s, %s}", ok, addr, 32*n, x0, x1)
			vals[n] = [2]string{x0, x1}
		}
		if s.Extra != nil {
			f.attnQuant(s, qargs, r, ok, t4, vals)
		}
	}
	if split {
		f.place(skip)
	}
	f.ins("bar.sync 0") // the other threads may read these rows next
}

// attnFold folds a split's warps' partial results into warp 0's (the
// others then branch to skip): warps 1… leave their rows' maxima, lane
// sums (state: mA, mB, lA, lB) and output tiles in shared memory, value i
// of lane l at [(w−1)·per + 128i + 4l]; warp 0 takes each in turn as
// flash attention takes a block, m' = max(m, m_w), x' = x·2^(m−m') +
// x_w·2^(m_w−m'). Warp 0 always holds block 0, so m' is finite and a warp
// with no block (m_w = −Inf) adds nothing.
func (f *fn) attnFold(sh kernel.AttnShape, warp, l, smem string, state []string, o [][4]string, skip string) {
	vals := append([]string(nil), state...)
	for _, tile := range o {
		vals = append(vals, tile[:]...)
	}
	per := 4 * 32 * len(vals)
	w0, gathered := f.reg(cPred), f.label()
	f.ins("setp.eq.u32 %s, %s, 0", w0, warp)
	la := f.reg(c32)
	f.ins("mad.lo.u32 %s, %s, 4, %s", la, l, smem)
	f.ins("@%s bra %s", w0, gathered)
	a := f.reg(c32)
	f.ins("add.u32 %s, %s, -1", a, warp)
	f.ins("mad.lo.u32 %s, %s, %d, %s", a, a, per, la)
	for i, v := range vals {
		f.ins("st.shared.f32 [%s+%d], %s", a, 128*i, v)
	}
	f.place(gathered)
	f.ins("bar.sync 0")
	f.ins("@!%s bra %s", w0, skip)
	mA, mB, lA, lB := state[0], state[1], state[2], state[3]
	for w := 1; w < sh.Warps; w++ {
		at := func(i int) string {
			r := f.reg(cF32)
			f.ins("ld.shared.f32 %s, [%s+%d]", r, la, (w-1)*per+128*i)
			return r
		}
		var keep, take [2]string
		for h, m := range []string{mA, mB} {
			mw, nm := at(h), f.reg(cF32)
			f.ins("max.f32 %s, %s, %s", nm, m, mw)
			keep[h], take[h] = f.reg(cF32), f.reg(cF32)
			f.ins("sub.f32 %s, %s, %s", keep[h], m, nm)
			f.ins("ex2.approx.ftz.f32 %s, %s", keep[h], keep[h])
			f.ins("sub.f32 %s, %s, %s", take[h], mw, nm)
			f.ins("ex2.approx.ftz.f32 %s, %s", take[h], take[h])
			f.ins("mov.f32 %s, %s", m, nm)
		}
		for h, sum := range []string{lA, lB} {
			lw := at(2 + h)
			f.ins("mul.f32 %s, %s, %s", sum, sum, keep[h])
			f.ins("fma.rn.f32 %s, %s, %s, %s", sum, lw, take[h], sum)
		}
		for n := range o {
			for e := range 4 {
				ow := at(4 + 4*n + e)
				f.ins("mul.f32 %s, %s, %s", o[n][e], o[n][e], keep[e/2])
				f.ins("fma.rn.f32 %s, %s, %s, %s", o[n][e], ow, take[e/2], o[n][e])
			}
		}
	}
}

// quadFold folds the f32 r over the four lanes of its quad (shfl.bfly 1,
// then 2) with op ("max.f32", "add.f32"): every lane ends with the fold.
func (f *fn) quadFold(op, r string) {
	for _, b := range []int{1, 2} {
		o := f.reg(cF32)
		f.ins("shfl.sync.bfly.b32 %s, %s, %d, 31, -1", o, r, b)
		f.ins("%s %s, %s, %s", op, r, r, o)
	}
}

// attnQuant stores a row's values as Q8_0 blocks (kernel.AttnQuant): block
// b is tiles 4b..4b+3, 8 values a lane of the row's quad; the quad's
// maximum by shfl.bfly, then QuantizeQ8_0's arithmetic (d = f16(amax/127),
// q = round_even(v·(127/amax)), each step rounded as the IR rounds it);
// lane t stores its values' quants as byte pairs at 8n + 2t, lane 0 the
// block's scale.
func (f *fn) attnQuant(s *kernel.Stmt, qargs []string, row, ok, t4 string, vals [][2]string) {
	qb, db := f.buf(s.Extra[0]), f.buf(s.Extra[1])
	if qb == nil || db == nil {
		return
	}
	qaddr, daddr, tc := f.reg(c64), f.reg(c64), f.reg(c64)
	f.ins("mad.lo.s64 %s, %s, %s, %s", qaddr, row, qargs[1], qargs[0])
	f.ins("cvt.u64.u32 %s, %s", tc, t4)
	f.ins("shl.b64 %s, %s, 1", tc, tc)
	f.ins("add.s64 %s, %s, %s", qaddr, qaddr, tc)
	f.ins("add.s64 %s, %s, %s", qaddr, qb.addr, qaddr)
	f.ins("mad.lo.s64 %s, %s, %s, %s", daddr, row, qargs[3], qargs[2])
	f.ins("shl.b64 %s, %s, 2", daddr, daddr)
	f.ins("add.s64 %s, %s, %s", daddr, db.addr, daddr)
	first := f.reg(cPred)
	f.ins("setp.eq.and.u32 %s, %s, 0, %s", first, t4, ok)
	for b := range len(vals) / 4 {
		amax := f.reg(cF32)
		f.ins("mov.f32 %s, 0f00000000", amax)
		for n := 4 * b; n < 4*b+4; n++ {
			for _, v := range vals[n] {
				a := f.reg(cF32)
				f.ins("abs.f32 %s, %s", a, v)
				f.ins("max.f32 %s, %s, %s", amax, amax, a)
			}
		}
		f.quadFold("max.f32", amax)
		d, h, id := f.reg(cF32), f.reg(c16), f.reg(cF32)
		f.ins("div.rn.f32 %s, %s, 0f42FE0000", d, amax) // amax/127
		f.ins("cvt.rn.f16.f32 %s, %s", h, d)
		f.ins("cvt.f32.f16 %s, %s", d, h)
		f.ins("@%s st.global.f32 [%s+%d], %s", first, daddr, 4*b, d)
		nz := f.reg(cPred)
		f.ins("div.rn.f32 %s, 0f42FE0000, %s", id, amax) // 127/amax
		f.ins("setp.ne.f32 %s, %s, 0f00000000", nz, amax)
		f.ins("selp.f32 %s, %s, 0f00000000, %s", id, id, nz)
		for n := 4 * b; n < 4*b+4; n++ {
			var q [2]string
			for e, v := range vals[n] {
				p := f.reg(cF32)
				q[e] = f.reg(c32)
				f.ins("mul.rn.f32 %s, %s, %s", p, v, id)
				f.ins("cvt.rni.s32.f32 %s, %s", q[e], p)
			}
			pair := f.reg(c32)
			f.ins("prmt.b32 %s, %s, %s, 0x40", pair, q[0], q[1]) // low bytes: q0, q1
			f.ins("@%s st.global.u16 [%s+%d], %s", ok, qaddr, 8*n, pair)
		}
	}
}
