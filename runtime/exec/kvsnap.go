package exec

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// KVLayout is what one cached position of a runner holds: for each layer a
// K row and a V row of Dims[layer] f16 values (0 for a layer without
// attention). Two runners of one model have equal layouts; SaveSeq's bytes
// load only into an equal layout.
type KVLayout struct {
	Dims []int
}

// BytesPerToken is the KV memory one position takes.
func (l KVLayout) BytesPerToken() int {
	n := 0
	for _, d := range l.Dims {
		n += 4 * d // K and V, 2 bytes a value
	}
	return n
}

// Equal reports whether l and o describe the same cache rows.
func (l KVLayout) Equal(o KVLayout) bool { return slices.Equal(l.Dims, o.Dims) }

// KVLayout describes the runner's cache rows.
func (r *Runner) KVLayout() KVLayout {
	l := KVLayout{Dims: make([]int, len(r.kv))}
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
		d := kv.dim
		s, t := src*ctx*d, dst*ctx*d
		copy(kv.k[t:t+n*d], kv.k[s:s+n*d])
		copy(kv.v[t:t+n*d], kv.v[s:s+n*d])
	}
	r.seqPos[dst] = n
	return nil
}

// SaveSeq writes sequence seq's first n positions into dst, which must be
// exactly n × KVLayout().BytesPerToken() bytes: layer after layer, its K
// rows then its V rows, f16 little-endian.
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
		at := seq * ctx * kv.dim
		for _, c := range [2][]uint16{kv.k, kv.v} {
			for _, h := range c[at : at+n*kv.dim] {
				binary.LittleEndian.PutUint16(dst[o:], h)
				o += 2
			}
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
		at := seq * ctx * kv.dim
		for _, c := range [2][]uint16{kv.k, kv.v} {
			row := c[at : at+n*kv.dim]
			for i := range row {
				row[i] = binary.LittleEndian.Uint16(src[o:])
				o += 2
			}
		}
	}
	r.seqPos[seq] = n
	return nil
}
