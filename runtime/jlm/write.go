package jlm

import (
	"bufio"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
)

// Output is where a Writer writes: sequential writes for the body and one
// WriteAt at offset 0 for the header, last. *os.File is one.
type Output interface {
	io.Writer
	io.WriterAt
}

// Writer streams a .jlm file: tensors one at a time, then the metadata and
// index, then the header. Memory use is the index plus the caller's buffers,
// whatever the tensors' size. Until Finish returns, the file has no magic
// and no reader accepts it.
type Writer struct {
	out     Output
	off     int64 // bytes written so far
	tensors []TensorInfo
	names   map[string]bool
	cur     *TensorWriter
	err     error // sticky: once set, every call fails with it
	done    bool
}

// NewWriter starts a file on out, which must be empty and positioned at 0.
func NewWriter(out Output) (*Writer, error) {
	w := &Writer{out: out, names: map[string]bool{}}
	// A zero first page: a reserved header that Finish overwrites.
	w.write(make([]byte, Alignment))
	return w, w.err
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.out.Write(b)
	w.off += int64(n)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("writing .jlm at offset %d: %w", w.off, err)
	}
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

// Create starts the next tensor; write exactly its bytes (GGUF block layout)
// to the returned TensorWriter and Close it before the next Create.
func (w *Writer) Create(name string, typ quant.Type, dims []int64) (*TensorWriter, error) {
	switch {
	case w.err != nil:
		return nil, w.err
	case w.done:
		return nil, errors.New("jlm: Create after Finish")
	case w.cur != nil:
		return nil, w.fail(fmt.Errorf("jlm: Create(%q) before tensor %q was closed", name, w.cur.t.Name))
	case len(name) > MaxNameLen:
		return nil, w.fail(fmt.Errorf("tensor name %.40q… is %d bytes, over the %d limit", name, len(name), MaxNameLen))
	case w.names[name]:
		return nil, w.fail(fmt.Errorf("duplicate tensor name %q", name))
	}
	size, err := tensorSize(name, typ, dims)
	if err != nil {
		return nil, w.fail(err)
	}
	if pad := alignUp(w.off, Alignment) - w.off; pad > 0 {
		w.write(make([]byte, pad))
	}
	if w.err != nil {
		return nil, w.err
	}
	w.names[name] = true
	tw := &TensorWriter{w: w, crc: crc32.New(castagnoli), t: TensorInfo{
		Name: name, Type: typ, Layout: LayoutGGML, Dims: append([]int64(nil), dims...), Offset: w.off, Size: size,
	}}
	if IsExpertTensor(name, dims) {
		n := dims[2]
		es := size / n
		tw.t.Experts = make([]Range, n)
		for i := range tw.t.Experts {
			tw.t.Experts[i] = Range{Offset: w.off + int64(i)*es, Size: es}
		}
		tw.ecrc = crc32.New(castagnoli)
	}
	w.cur = tw
	return tw, nil
}

// WriteTensor writes a whole tensor from r, which must yield exactly its
// bytes, copying through buf (nil: a 4 MiB buffer).
func (w *Writer) WriteTensor(name string, typ quant.Type, dims []int64, r io.Reader, buf []byte) error {
	tw, err := w.Create(name, typ, dims)
	if err != nil {
		return err
	}
	if buf == nil {
		buf = make([]byte, 4<<20)
	}
	if _, err := io.CopyBuffer(tw, io.LimitReader(r, tw.t.Size), buf); err != nil {
		return w.fail(fmt.Errorf("tensor %q: %w", name, err))
	}
	return tw.Close()
}

// Finish writes md, the index and finally the header. The caller syncs
// and closes the output.
func (w *Writer) Finish(md *meta.Map) error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return errors.New("jlm: Finish called twice")
	}
	if w.cur != nil {
		return w.fail(fmt.Errorf("jlm: Finish before tensor %q was closed", w.cur.t.Name))
	}
	w.done = true
	h := header{version: Version, size: HeaderSize, align: Alignment, dataOff: Alignment}
	h.dataSize = uint64(w.off - Alignment)
	bw := bufio.NewWriterSize(writerFunc(func(b []byte) (int, error) { w.write(b); return len(b), w.err }), 1<<20)

	h.metaOff = uint64(w.off)
	crc := crc32.New(castagnoli)
	mw := &meta.Writer{W: io.MultiWriter(bw, crc)}
	mw.U64(uint64(md.Len()))
	meta.WriteKVs(mw, md)
	h.metaSize, h.metaCRC = uint64(mw.N), crc.Sum32()

	crc.Reset()
	iw := &meta.Writer{W: io.MultiWriter(bw, crc)}
	writeIndex(iw, w.tensors)
	h.indexOff, h.indexSize, h.indexCRC = h.metaOff+h.metaSize, uint64(iw.N), crc.Sum32()
	if err := firstErr(mw.Err, iw.Err, bw.Flush(), w.err); err != nil {
		return w.fail(fmt.Errorf("writing .jlm metadata and index: %w", err))
	}
	if _, err := w.out.WriteAt(h.encode(), 0); err != nil {
		return w.fail(fmt.Errorf("writing .jlm header: %w", err))
	}
	return nil
}

// Tensors lists the tensors written so far.
func (w *Writer) Tensors() []TensorInfo { return w.tensors }

// TensorWriter takes one tensor's bytes; see Writer.Create.
type TensorWriter struct {
	w    *Writer
	t    TensorInfo
	n    int64 // bytes written
	crc  hash.Hash32
	ecrc hash.Hash32 // current expert's crc, for expert tensors
}

// Write checksums p and writes it to the file.
func (tw *TensorWriter) Write(p []byte) (int, error) {
	w := tw.w
	if w.err != nil {
		return 0, w.err
	}
	if w.cur != tw {
		return 0, fmt.Errorf("jlm: write to closed tensor %q", tw.t.Name)
	}
	if int64(len(p)) > tw.t.Size-tw.n {
		return 0, w.fail(fmt.Errorf("tensor %q: %d bytes written, more than its %d", tw.t.Name, tw.n+int64(len(p)), tw.t.Size))
	}
	tw.crc.Write(p)
	if tw.ecrc != nil {
		tw.expertCRC(p)
	}
	w.write(p)
	if w.err != nil {
		return 0, w.err
	}
	tw.n += int64(len(p))
	return len(p), nil
}

// expertCRC feeds p to the per-expert checksums, splitting at expert edges.
func (tw *TensorWriter) expertCRC(p []byte) {
	es := tw.t.Experts[0].Size
	pos := tw.n
	for len(p) > 0 {
		i := pos / es
		k := min(int64(len(p)), (i+1)*es-pos)
		tw.ecrc.Write(p[:k])
		p, pos = p[k:], pos+k
		if pos%es == 0 {
			tw.t.Experts[i].CRC = tw.ecrc.Sum32()
			tw.ecrc.Reset()
		}
	}
}

// Close ends the tensor; it fails unless exactly its size was written.
func (tw *TensorWriter) Close() error {
	w := tw.w
	if w.err != nil {
		return w.err
	}
	if w.cur != tw {
		return fmt.Errorf("jlm: tensor %q closed twice", tw.t.Name)
	}
	if tw.n != tw.t.Size {
		return w.fail(fmt.Errorf("tensor %q: got %d bytes, want %d (source truncated?)", tw.t.Name, tw.n, tw.t.Size))
	}
	tw.t.CRC = tw.crc.Sum32()
	w.tensors = append(w.tensors, tw.t)
	w.cur = nil
	return nil
}

// Info is the tensor's index entry (checksums are final after Close).
func (tw *TensorWriter) Info() TensorInfo { return tw.t }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }
