package exec

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// KVLayout is what one cached position of a runner holds: for each layer a
// K row and a V row of Dims[layer] values (0 for a layer without
// attention), in cache type Type (KVF16 or KVQ8_0; "" is f16). Two runners
// of one model and cache type have equal layouts; SaveSeq's bytes load
// only into an equal layout.
type KVLayout struct {
	Dims []int
	Type string
}

// RowBytes is the bytes of one position's K (or V) row in layer i, as
// SaveSeq writes it.
func (l KVLayout) RowBytes(i int) int { return kvRowBytes(l.kvType(), l.Dims[i]) }

// BytesPerToken is the KV memory one position takes.
func (l KVLayout) BytesPerToken() int {
	n := 0
	for i := range l.Dims {
		n += 2 * l.RowBytes(i) // K and V
	}
	return n
}

// Equal reports whether l and o describe the same cache rows.
func (l KVLayout) Equal(o KVLayout) bool {
	return slices.Equal(l.Dims, o.Dims) && l.kvType() == o.kvType()
}

func (l KVLayout) kvType() string {
	if l.Type == "" {
		return KVF16
	}
	return l.Type
}

// KVLayout describes the runner's cache rows.
func (r *Runner) KVLayout() KVLayout {
	l := KVLayout{Dims: make([]int, len(r.kv)), Type: r.opt.KVType}
	for i, kv := range r.kv {
		l.Dims[i] = kv.dim
	}
	return l
}

// KVBytes is the KV memory the runner holds: every sequence's full context.
func (r *Runner) KVBytes() int64 {
	return int64(r.KVLayout().BytesPerToken()) * int64(r.opt.Context) * int64(r.opt.Sequences)
}

func (r *Runner) checkSeq(seq int) error {
	if seq < 0 || seq >= r.opt.Sequences {
		return fmt.Errorf("kv: sequence %d of %d", seq, r.opt.Sequences)
	}
	return nil
}

// CopySeq makes sequence dst hold src's first n positions (KV rows and
// position count), so both continue from the same prefix. dst's own
// positions are dropped.
func (r *Runner) CopySeq(dst, src, n int) error {
	if err := r.checkSeq(dst); err != nil {
		return err
	}
	if err := r.checkSeq(src); err != nil {
		return err
	}
	switch {
	case dst == src:
		return fmt.Errorf("kv: copying sequence %d onto itself", src)
	case n < 0 || n > r.seqPos[src]:
		return fmt.Errorf("kv: copying %d positions of sequence %d, which holds %d", n, src, r.seqPos[src])
	}
	ctx := r.opt.Context
	for _, kv := range r.kv {
		for _, c := range kv.caches() {
			c.copy(dst*ctx*kv.dim, src*ctx*kv.dim, n*kv.dim)
		}
	}
	r.seqPos[dst] = n
	return nil
}

// SaveSeq writes sequence seq's first n positions into dst, which must be
// exactly n × KVLayout().BytesPerToken() bytes: layer after layer, its K
// rows then its V rows (KVLayout.RowBytes each). An f16 row is its values,
// f16 little-endian; a q8_0 row is ggml's block_q8_0 for each block of 32
// values: the scale (f16 little-endian), then the 32 int8 quants.
func (r *Runner) SaveSeq(seq, n int, dst []byte) error {
	if err := r.checkSeq(seq); err != nil {
		return err
	}
	if n < 0 || n > r.seqPos[seq] {
		return fmt.Errorf("kv: saving %d positions of sequence %d, which holds %d", n, seq, r.seqPos[seq])
	}
	if want := n * r.KVLayout().BytesPerToken(); len(dst) != want {
		return fmt.Errorf("kv: %d positions take %d bytes, the buffer has %d", n, want, len(dst))
	}
	ctx, o := r.opt.Context, 0
	for _, kv := range r.kv {
		for _, c := range kv.caches() {
			o += c.put(dst[o:], seq*ctx*kv.dim, n*kv.dim)
		}
	}
	return nil
}

// LoadSeq replaces sequence seq's cache with n positions written by
// SaveSeq (of a runner with an equal KVLayout).
func (r *Runner) LoadSeq(seq, n int, src []byte) error {
	if err := r.checkSeq(seq); err != nil {
		return err
	}
	if n < 0 || n > r.opt.Context {
		return fmt.Errorf("kv: loading %d positions into a context of %d", n, r.opt.Context)
	}
	if want := n * r.KVLayout().BytesPerToken(); len(src) != want {
		return fmt.Errorf("kv: %d positions take %d bytes, got %d", n, want, len(src))
	}
	ctx, o := r.opt.Context, 0
	for _, kv := range r.kv {
		for _, c := range kv.caches() {
			o += c.get(src[o:], seq*ctx*kv.dim, n*kv.dim)
		}
	}
	r.seqPos[seq] = n
	return nil
}

// kvCache is one of a layer's two caches: f16 values, or (q non-nil) q8_0
// quants and their blocks' scales. Offsets count values.
type kvCache struct {
	f16 []uint16
	q   []byte
	s   []uint16
}

func (kv *layerKV) caches() [2]kvCache {
	return [2]kvCache{{kv.k, kv.kq, kv.ks}, {kv.v, kv.vq, kv.vs}}
}

// copy copies values [src, src+m) to [dst, dst+m).
func (c kvCache) copy(dst, src, m int) {
	if c.q == nil {
		copy(c.f16[dst:dst+m], c.f16[src:src+m])
		return
	}
	copy(c.q[dst:dst+m], c.q[src:src+m])
	copy(c.s[dst/32:(dst+m)/32], c.s[src/32:(src+m)/32])
}

// put writes values [at, at+m) into dst as SaveSeq lays them out and
// returns the bytes written.
func (c kvCache) put(dst []byte, at, m int) int {
	if c.q == nil {
		for i, h := range c.f16[at : at+m] {
			binary.LittleEndian.PutUint16(dst[2*i:], h)
		}
		return 2 * m
	}
	o := 0
	for b := at / 32; b < (at+m)/32; b++ {
		binary.LittleEndian.PutUint16(dst[o:], c.s[b])
		copy(dst[o+2:o+34], c.q[b*32:b*32+32])
		o += 34
	}
	return o
}

// get reads values [at, at+m) from src, written by put, and returns the
// bytes read.
func (c kvCache) get(src []byte, at, m int) int {
	if c.q == nil {
		for i := range c.f16[at : at+m] {
			c.f16[at+i] = binary.LittleEndian.Uint16(src[2*i:])
		}
		return 2 * m
	}
	o := 0
	for b := at / 32; b < (at+m)/32; b++ {
		c.s[b] = binary.LittleEndian.Uint16(src[o:])
		copy(c.q[b*32:b*32+32], src[o+2:o+34])
		o += 34
	}
	return o
}
