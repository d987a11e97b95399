package jlm

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"sort"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
)

// minEntry is the smallest index entry: name length, type, layout, rank, one
// dim, offset, size, crc and expert count.
const minEntry = 8 + 4 + 4 + 4 + 8 + 8 + 8 + 4 + 8

// expertEntry is one expert's offset, size and crc.
const expertEntry = 8 + 8 + 4

// writeIndex writes the index section for ts.
func writeIndex(w *meta.Writer, ts []TensorInfo) {
	w.U64(uint64(len(ts)))
	for i := range ts {
		t := &ts[i]
		w.String(t.Name)
		w.U32(uint32(t.Type))
		w.U32(t.Layout)
		w.U32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			w.U64(uint64(d))
		}
		w.U64(uint64(t.Offset))
		w.U64(uint64(t.Size))
		w.U32(t.CRC)
		w.U64(uint64(len(t.Experts)))
		for _, e := range t.Experts {
			w.U64(uint64(e.Offset))
			w.U64(uint64(e.Size))
			w.U32(e.CRC)
		}
	}
}

// tensorSize is the layout-0 byte size of a tensor, checking dims.
func tensorSize(name string, typ quant.Type, dims []int64) (int64, error) {
	if len(dims) == 0 || len(dims) > MaxDims {
		return 0, fmt.Errorf("tensor %q has %d dimensions (want 1..%d)", name, len(dims), MaxDims)
	}
	if !typ.Known() {
		return 0, fmt.Errorf("tensor %q has unknown ggml type %d", name, uint32(typ))
	}
	elems := uint64(1)
	for d, x := range dims {
		if x <= 0 {
			return 0, fmt.Errorf("tensor %q dimension %d is %d", name, d, x)
		}
		hi, lo := bits.Mul64(elems, uint64(x))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("tensor %q element count overflows", name)
		}
		elems = lo
	}
	row, err := quant.RowBytes(typ, dims[0])
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", name, err)
	}
	hi, sz := bits.Mul64(uint64(row), elems/uint64(dims[0]))
	if hi != 0 || sz > math.MaxInt64 {
		return 0, fmt.Errorf("tensor %q byte size overflows", name)
	}
	return int64(sz), nil
}

// readIndex parses and checks the index section b, which starts at file
// offset off, against the header h.
func readIndex(b []byte, off int64, h *header) ([]TensorInfo, map[string]int, error) {
	r := meta.NewReader(bytes.NewReader(b), off, int64(len(b)))
	n, err := r.U64()
	if err != nil {
		return nil, nil, fmt.Errorf("index tensor count: %w", err)
	}
	if n > uint64(r.Remain)/minEntry {
		return nil, nil, fmt.Errorf("at offset %d: index claims %d tensors, more than its %d bytes can hold", off, n, len(b))
	}
	ts := make([]TensorInfo, n)
	byName := make(map[string]int, n)
	for i := range ts {
		if err := readEntry(r, &ts[i], h); err != nil {
			return nil, nil, fmt.Errorf("index entry %d: %w", i, err)
		}
		if _, dup := byName[ts[i].Name]; dup {
			return nil, nil, fmt.Errorf("index entry %d: duplicate tensor name %q", i, ts[i].Name)
		}
		byName[ts[i].Name] = i
	}
	if r.Remain != 0 {
		return nil, nil, fmt.Errorf("at offset %d: %d unexpected bytes after the last index entry", r.Off, r.Remain)
	}
	if err := checkOverlap(ts); err != nil {
		return nil, nil, err
	}
	return ts, byName, nil
}

func readEntry(r *meta.Reader, t *TensorInfo, h *header) error {
	at := r.Off
	var err error
	if t.Name, err = r.String(); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if len(t.Name) > MaxNameLen {
		return fmt.Errorf("at offset %d: tensor name is %d bytes, over the %d limit", at, len(t.Name), MaxNameLen)
	}
	typ, err := r.U32()
	if err != nil {
		return fmt.Errorf("tensor %q type: %w", t.Name, err)
	}
	t.Type = quant.Type(typ)
	if t.Layout, err = r.U32(); err != nil {
		return fmt.Errorf("tensor %q layout: %w", t.Name, err)
	}
	if t.Layout != LayoutGGML {
		return fmt.Errorf("tensor %q uses layout %d, which this build does not know (upgrade jitllm or re-convert)", t.Name, t.Layout)
	}
	nd, err := r.U32()
	if err != nil {
		return fmt.Errorf("tensor %q rank: %w", t.Name, err)
	}
	if nd == 0 || nd > MaxDims {
		return fmt.Errorf("tensor %q has %d dimensions (want 1..%d)", t.Name, nd, MaxDims)
	}
	t.Dims = make([]int64, nd)
	for d := range t.Dims {
		x, err := r.U64()
		if err != nil {
			return fmt.Errorf("tensor %q shape: %w", t.Name, err)
		}
		if x == 0 || x > math.MaxInt64 {
			return fmt.Errorf("tensor %q dimension %d is %d", t.Name, d, x)
		}
		t.Dims[d] = int64(x)
	}
	want, err := tensorSize(t.Name, t.Type, t.Dims)
	if err != nil {
		return err
	}
	at = r.Off
	off, err := r.U64()
	if err != nil {
		return fmt.Errorf("tensor %q offset: %w", t.Name, err)
	}
	size, err := r.U64()
	if err != nil {
		return fmt.Errorf("tensor %q size: %w", t.Name, err)
	}
	if size != uint64(want) {
		return fmt.Errorf("at offset %d: tensor %q size is %d bytes, but %s %v takes %d", at, t.Name, size, t.Type, t.Dims, want)
	}
	if off%uint64(h.align) != 0 {
		return fmt.Errorf("at offset %d: tensor %q data offset %d is not a multiple of the alignment %d", at, t.Name, off, h.align)
	}
	if off < h.dataOff || off-h.dataOff > h.dataSize || size > h.dataSize-(off-h.dataOff) {
		return fmt.Errorf("at offset %d: tensor %q data [%d, +%d) lies outside the data section [%d, +%d)", at, t.Name, off, size, h.dataOff, h.dataSize)
	}
	t.Offset, t.Size = int64(off), int64(size)
	if t.CRC, err = r.U32(); err != nil {
		return fmt.Errorf("tensor %q checksum: %w", t.Name, err)
	}
	return readExperts(r, t)
}

// readExperts reads an entry's expert list; in layout 0 the ranges must be
// exactly the contiguous dims[2] slices.
func readExperts(r *meta.Reader, t *TensorInfo) error {
	at := r.Off
	n, err := r.U64()
	if err != nil {
		return fmt.Errorf("tensor %q expert count: %w", t.Name, err)
	}
	if n == 0 {
		return nil
	}
	if !IsExpertTensor(t.Name, t.Dims) || n != uint64(t.Dims[2]) {
		return fmt.Errorf("at offset %d: tensor %q %v lists %d experts; only a 3-D _exps tensor may, with dims[2] of them", at, t.Name, t.Dims, n)
	}
	if n > uint64(r.Remain)/expertEntry {
		return fmt.Errorf("at offset %d: tensor %q claims %d experts, more than the %d index bytes left can hold", at, t.Name, n, r.Remain)
	}
	es := t.Size / int64(n)
	t.Experts = make([]Range, n)
	for i := range t.Experts {
		at := r.Off
		off, err1 := r.U64()
		size, err2 := r.U64()
		crc, err3 := r.U32()
		if err := firstErr(err1, err2, err3); err != nil {
			return fmt.Errorf("tensor %q expert %d: %w", t.Name, i, err)
		}
		if off != uint64(t.Offset+int64(i)*es) || size != uint64(es) {
			return fmt.Errorf("at offset %d: tensor %q expert %d range [%d, +%d) is not its slice [%d, +%d)", at, t.Name, i, off, size, t.Offset+int64(i)*es, es)
		}
		t.Experts[i] = Range{Offset: int64(off), Size: int64(size), CRC: crc}
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func checkOverlap(ts []TensorInfo) error {
	idx := make([]int, len(ts))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ts[idx[a]].Offset < ts[idx[b]].Offset })
	for k := 1; k < len(idx); k++ {
		p, q := &ts[idx[k-1]], &ts[idx[k]]
		if p.Offset+p.Size > q.Offset {
			return fmt.Errorf("tensors %q [%d, %d) and %q [%d, %d) overlap", p.Name, p.Offset, p.Offset+p.Size, q.Name, q.Offset, q.Offset+q.Size)
		}
	}
	return nil
}
