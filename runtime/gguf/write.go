package gguf

import (
	"fmt"
	"io"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
)

// WriteTensor is one tensor to write: its data comes from Data, which must
// write exactly the tensor's byte size.
type WriteTensor struct {
	Name string
	Type quant.Type
	Dims []int64
	Data func(w io.Writer) error
}

// Size is the tensor's byte size.
func (t *WriteTensor) Size() (int64, error) {
	if len(t.Dims) == 0 {
		return 0, fmt.Errorf("tensor %q has no dimensions", t.Name)
	}
	row, err := quant.RowBytes(t.Type, t.Dims[0])
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	n := row
	for _, d := range t.Dims[1:] {
		n *= d
	}
	return n, nil
}

// Write writes a GGUF v3 file: md (general.alignment in it, if any, sets the
// alignment), then the tensors in order. Data streams through; nothing is
// buffered whole.
func Write(w io.Writer, md *meta.Map, tensors []WriteTensor) error {
	align := int64(DefaultAlignment)
	if a, ok := md.Uint("general.alignment"); ok && a > 0 {
		align = int64(a)
	}
	ww := &meta.Writer{W: w}
	ww.Bytes([]byte(Magic))
	ww.U32(3)
	ww.U64(uint64(len(tensors)))
	ww.U64(uint64(md.Len()))
	meta.WriteKVs(ww, md)
	off := int64(0)
	sizes := make([]int64, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		sz, err := t.Size()
		if err != nil {
			return err
		}
		sizes[i] = sz
		ww.String(t.Name)
		ww.U32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			ww.U64(uint64(d))
		}
		ww.U32(uint32(t.Type))
		ww.U64(uint64(off))
		off = alignUp(off+sz, align)
	}
	ww.Pad(align)
	for i := range tensors {
		start := ww.N
		if ww.Err != nil {
			return ww.Err
		}
		if err := tensors[i].Data(ww); err != nil {
			return fmt.Errorf("tensor %q data: %w", tensors[i].Name, err)
		}
		if got := ww.N - start; got != sizes[i] {
			return fmt.Errorf("tensor %q: wrote %d bytes, want %d", tensors[i].Name, got, sizes[i])
		}
		ww.Pad(align)
	}
	return ww.Err
}

// Bytes returns a Data function that writes b.
func Bytes(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}
