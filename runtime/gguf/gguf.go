// Package gguf reads GGUF files (versions 2 and 3), the format llama.cpp
// loads. Only the header, metadata and tensor index are read up front; tensor
// data is memory-mapped (or read on demand) and never loaded just to list it.
package gguf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/mmap"
)

// Magic opens every GGUF file.
const Magic = "GGUF"

// DefaultAlignment applies when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is ggml's limit on tensor rank.
const MaxDims = 4

// MaxNameLen bounds a tensor name (ggml's own limit is 63 bytes; some tools
// write longer names, which we accept up to this).
const MaxNameLen = 1024

// TensorInfo describes one tensor of the file.
type TensorInfo struct {
	Name   string
	Type   quant.Type
	Dims   []int64 // ggml order: Dims[0] is the row length (ne0)
	Offset int64   // absolute offset of the first byte in the file
	Size   int64   // bytes of data
}

// Elements is the number of values in the tensor.
func (t *TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is an opened GGUF file.
type File struct {
	Path       string
	Version    uint32
	Meta       *meta.Map
	Tensors    []TensorInfo
	Alignment  int64
	DataOffset int64 // where the tensor data section begins
	Size       int64 // file size

	ra     io.ReaderAt
	closer io.Closer
	mapped []byte // whole file when memory-mapped
	byName map[string]int
}

// Open opens and parses path. Tensor data stays on disk (memory-mapped where
// the platform allows) until asked for.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	f, err := Parse(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path = path
	f.closer = fh
	if m, err := mmap.Map(fh, st.Size()); err == nil {
		f.mapped = m
	}
	return f, nil
}

// Close releases the file and its mapping.
func (f *File) Close() error {
	if f.mapped != nil {
		mmap.Unmap(f.mapped)
		f.mapped = nil
	}
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// Parse reads the header, metadata and tensor index of a GGUF stream of the
// given size. It checks every count, length and offset against the size.
func Parse(ra io.ReaderAt, size int64) (*File, error) {
	r := meta.NewReader(io.NewSectionReader(ra, 0, size), 0, size)
	magic, err := r.Bytes(4)
	if err != nil {
		return nil, fmt.Errorf("not a GGUF file: %w", err)
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("not a GGUF file: magic is %q, want %q", magic, Magic)
	}
	version, err := r.U32()
	if err != nil {
		return nil, fmt.Errorf("GGUF header: %w", err)
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, errors.New("GGUF version 1 is not supported (re-convert with a current llama.cpp)")
	case bits.ReverseBytes32(version) == 2 || bits.ReverseBytes32(version) == 3:
		return nil, errors.New("big-endian GGUF is not supported")
	default:
		return nil, fmt.Errorf("unsupported GGUF version %d (want 2 or 3)", version)
	}
	nTensors, err := r.U64()
	if err != nil {
		return nil, fmt.Errorf("GGUF header tensor count: %w", err)
	}
	nKV, err := r.U64()
	if err != nil {
		return nil, fmt.Errorf("GGUF header metadata count: %w", err)
	}
	// A tensor info is at least: name length 8, n_dims 4, one dim 8, type 4, offset 8.
	if nTensors > uint64(r.Remain)/32 {
		return nil, fmt.Errorf("header claims %d tensors, more than the %d-byte file can index", nTensors, size)
	}
	md, err := meta.ReadKVs(r, nKV)
	if err != nil {
		return nil, err
	}
	f := &File{Version: version, Meta: md, Size: size, ra: ra, Alignment: DefaultAlignment}
	if v, ok := md.Get("general.alignment"); ok {
		a, ok := v.Uint()
		if !ok || v.Kind() != meta.Uint32 || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("general.alignment must be a power-of-two u32, got %s %s", v.Kind(), v)
		}
		f.Alignment = int64(a)
	}
	f.Tensors = make([]TensorInfo, nTensors)
	f.byName = make(map[string]int, nTensors)
	rel := make([]uint64, nTensors)
	for i := range f.Tensors {
		t := &f.Tensors[i]
		at := r.Off
		if t.Name, err = r.String(); err != nil {
			return nil, fmt.Errorf("tensor %d name: %w", i, err)
		}
		if len(t.Name) > MaxNameLen {
			return nil, fmt.Errorf("at offset %d: tensor %d name is %d bytes, over the %d limit", at, i, len(t.Name), MaxNameLen)
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("at offset %d: duplicate tensor name %q", at, t.Name)
		}
		f.byName[t.Name] = i
		nd, err := r.U32()
		if err != nil {
			return nil, fmt.Errorf("tensor %q rank: %w", t.Name, err)
		}
		if nd == 0 || nd > MaxDims {
			return nil, fmt.Errorf("tensor %q has %d dimensions (want 1..%d)", t.Name, nd, MaxDims)
		}
		t.Dims = make([]int64, nd)
		elems := uint64(1)
		for d := range t.Dims {
			x, err := r.U64()
			if err != nil {
				return nil, fmt.Errorf("tensor %q shape: %w", t.Name, err)
			}
			if x == 0 || x > math.MaxInt64 {
				return nil, fmt.Errorf("tensor %q dimension %d is %d", t.Name, d, x)
			}
			hi, lo := bits.Mul64(elems, x)
			if hi != 0 || lo > math.MaxInt64 {
				return nil, fmt.Errorf("tensor %q element count overflows", t.Name)
			}
			elems = lo
			t.Dims[d] = int64(x)
		}
		typ, err := r.U32()
		if err != nil {
			return nil, fmt.Errorf("tensor %q type: %w", t.Name, err)
		}
		t.Type = quant.Type(typ)
		if !t.Type.Known() {
			return nil, fmt.Errorf("tensor %q has unknown ggml type %d", t.Name, typ)
		}
		if _, err := quant.RowBytes(t.Type, t.Dims[0]); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		// Bytes = blocks * block bytes, computed without overflow (a row's
		// byte count alone can wrap int64: 2^62+1 F32 elements).
		l, _ := quant.LayoutOf(t.Type)
		hi, sz := bits.Mul64(elems/uint64(l.BlockSize), uint64(l.BlockBytes))
		if hi != 0 || sz > math.MaxInt64 {
			return nil, fmt.Errorf("tensor %q byte size overflows", t.Name)
		}
		t.Size = int64(sz)
		if rel[i], err = r.U64(); err != nil {
			return nil, fmt.Errorf("tensor %q offset: %w", t.Name, err)
		}
		if rel[i]%uint64(f.Alignment) != 0 {
			return nil, fmt.Errorf("tensor %q offset %d is not a multiple of the alignment %d", t.Name, rel[i], f.Alignment)
		}
	}
	f.DataOffset = alignUp(r.Off, f.Alignment)
	dataSize := size - f.DataOffset
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if dataSize < 0 || rel[i] > uint64(dataSize) || uint64(t.Size) > uint64(dataSize)-rel[i] {
			return nil, fmt.Errorf("tensor %q data [%d, +%d) runs past the end of the file (data section is %d bytes)", t.Name, rel[i], t.Size, max(dataSize, 0))
		}
		t.Offset = f.DataOffset + int64(rel[i])
	}
	if err := checkOverlap(f.Tensors); err != nil {
		return nil, err
	}
	return f, nil
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

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Reader returns a reader over one tensor's bytes.
func (f *File) Reader(t *TensorInfo) *io.SectionReader {
	return io.NewSectionReader(f.ra, t.Offset, t.Size)
}

// Data returns one tensor's bytes: a view of the mapping when the file is
// memory-mapped (do not write to it), else a fresh copy read from disk.
func (f *File) Data(t *TensorInfo) ([]byte, error) {
	if f.mapped != nil {
		return f.mapped[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
	}
	b := make([]byte, t.Size)
	if _, err := f.ra.ReadAt(b, t.Offset); err != nil {
		return nil, fmt.Errorf("reading tensor %q: %w", t.Name, err)
	}
	return b, nil
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
