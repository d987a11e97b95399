package jlm

import (
	"bytes"
	"fmt"
	"os"

	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/mmap"
)

// File is an opened .jlm file. Tensor data stays in the page cache (the file
// is memory-mapped) until touched.
type File struct {
	Path       string
	Version    uint32
	Alignment  int64
	Size       int64 // file size
	DataOffset int64
	DataSize   int64
	Meta       *meta.Map
	Tensors    []TensorInfo

	b      []byte // the whole file: a read-only mapping, or memory for Parse
	mapped bool
	byName map[string]int
}

// Open maps path and parses its header, metadata and index. Tensor
// checksums are not checked here; see Verify.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close() // the mapping outlives the descriptor
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < HeaderSize {
		return nil, fmt.Errorf("%s: file is %d bytes, shorter than the %d-byte .jlm header (truncated?)", path, st.Size(), HeaderSize)
	}
	b, err := mmap.Map(fh, st.Size())
	mapped := err == nil
	if !mapped {
		// No mmap on this platform: fall back to reading the file whole.
		if b, err = os.ReadFile(path); err != nil {
			return nil, err
		}
	}
	f, err := Parse(b)
	if err != nil {
		if mapped {
			mmap.Unmap(b)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path, f.mapped = path, mapped
	return f, nil
}

// Parse parses a whole .jlm image held in b. The File keeps b and returns
// views of it from Data.
func Parse(b []byte) (*File, error) {
	h, err := decodeHeader(b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	mb := b[h.metaOff : h.metaOff+h.metaSize]
	if got := Checksum(mb); got != h.metaCRC {
		return nil, fmt.Errorf("metadata section at offset %d: checksum mismatch: stored %08x, computed %08x (file corrupted)", h.metaOff, h.metaCRC, got)
	}
	ib := b[h.indexOff : h.indexOff+h.indexSize]
	if got := Checksum(ib); got != h.indexCRC {
		return nil, fmt.Errorf("index section at offset %d: checksum mismatch: stored %08x, computed %08x (file corrupted)", h.indexOff, h.indexCRC, got)
	}
	md, err := readMeta(mb, int64(h.metaOff))
	if err != nil {
		return nil, err
	}
	ts, byName, err := readIndex(ib, int64(h.indexOff), h)
	if err != nil {
		return nil, err
	}
	return &File{
		Version: h.version, Alignment: int64(h.align), Size: int64(len(b)),
		DataOffset: int64(h.dataOff), DataSize: int64(h.dataSize),
		Meta: md, Tensors: ts, b: b, byName: byName,
	}, nil
}

func readMeta(b []byte, off int64) (*meta.Map, error) {
	r := meta.NewReader(bytes.NewReader(b), off, int64(len(b)))
	n, err := r.U64()
	if err != nil {
		return nil, fmt.Errorf("metadata count: %w", err)
	}
	md, err := meta.ReadKVs(r, n)
	if err != nil {
		return nil, fmt.Errorf("metadata section: %w", err)
	}
	if r.Remain != 0 {
		return nil, fmt.Errorf("at offset %d: %d unexpected bytes after the last metadata entry", r.Off, r.Remain)
	}
	return md, nil
}

// Close releases the mapping; Data views must not be used afterwards.
func (f *File) Close() error {
	if f.mapped && f.b != nil {
		mmap.Unmap(f.b)
	}
	f.b = nil
	return nil
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Data is a read-only view of a tensor's bytes (do not write to it).
func (f *File) Data(t *TensorInfo) []byte { return f.Slice(Range{Offset: t.Offset, Size: t.Size}) }

// Slice is a read-only view of a range of the file, e.g. one from Expert.
func (f *File) Slice(r Range) []byte { return f.b[r.Offset : r.Offset+r.Size : r.Offset+r.Size] }

// Expert returns the byte range of expert i of an expert tensor; the range
// is absolute, so it can be read with pread or direct I/O on its own.
func (f *File) Expert(t *TensorInfo, i int) (Range, error) {
	if len(t.Experts) == 0 {
		return Range{}, fmt.Errorf("tensor %q is not an expert tensor", t.Name)
	}
	if i < 0 || i >= len(t.Experts) {
		return Range{}, fmt.Errorf("tensor %q has %d experts, no expert %d", t.Name, len(t.Experts), i)
	}
	return t.Experts[i], nil
}

// Verify checks the tensor's checksum and, for an expert tensor, each
// expert's.
func (f *File) Verify(t *TensorInfo) error {
	if got := Checksum(f.Data(t)); got != t.CRC {
		return fmt.Errorf("tensor %q at offset %d: checksum mismatch: stored %08x, computed %08x (file corrupted; re-convert it)", t.Name, t.Offset, t.CRC, got)
	}
	for i, e := range t.Experts {
		if err := f.VerifyRange(e); err != nil {
			return fmt.Errorf("tensor %q expert %d: %w", t.Name, i, err)
		}
	}
	return nil
}

// VerifyRange checks one range's checksum, e.g. an expert just paged in.
func (f *File) VerifyRange(r Range) error {
	if got := Checksum(f.Slice(r)); got != r.CRC {
		return fmt.Errorf("bytes [%d, +%d): checksum mismatch: stored %08x, computed %08x (file corrupted; re-convert it)", r.Offset, r.Size, r.CRC, got)
	}
	return nil
}

// Architecture is general.architecture, or "" when absent.
func (f *File) Architecture() string {
	s, _ := f.Meta.String("general.architecture")
	return s
}

// ParamCount is the total number of tensor elements.
func (f *File) ParamCount() int64 {
	var n int64
	for i := range f.Tensors {
		n += f.Tensors[i].Elements()
	}
	return n
}
