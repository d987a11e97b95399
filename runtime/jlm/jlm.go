// Package jlm reads and writes .jlm containers: GGUF's metadata and tensor
// bytes, with every tensor 4096-aligned for direct I/O, a CRC-32C per tensor
// and per expert, and the index after the data so writers can stream.
// docs/format.md is the specification; this package follows it.
package jlm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/jitllm/jitllm/kernels/quant"
)

// Magic opens every .jlm file.
const Magic = "JLM1"

// Version is the format version this package reads and writes.
const Version = 1

// Alignment is where this package starts each tensor (and the data section).
const Alignment = 4096

// HeaderSize is the size of a version-1 header.
const HeaderSize = 96

// MaxDims is ggml's limit on tensor rank.
const MaxDims = 4

// MaxNameLen bounds a tensor name.
const MaxNameLen = 1024

// LayoutGGML is layout 0: GGUF's block layout, the bytes exactly as GGUF held them.
const LayoutGGML = 0

// castagnoli is the CRC-32C table; hash/crc32 uses CPU instructions for it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C the format uses for tensors, experts and sections.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Range is a byte range of the file with its CRC-32C.
type Range struct {
	Offset int64 // absolute
	Size   int64
	CRC    uint32
}

// TensorInfo describes one tensor of a .jlm file.
type TensorInfo struct {
	Name    string
	Type    quant.Type
	Layout  uint32
	Dims    []int64 // ggml order: Dims[0] is the row length
	Offset  int64   // absolute, a multiple of the file's alignment
	Size    int64
	CRC     uint32
	Experts []Range // per-expert slices of an expert tensor, else nil
}

// Elements is the number of values in the tensor.
func (t *TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// IsExpertTensor reports whether a tensor of this name and shape gets
// per-expert ranges: llama.cpp's fused MoE weights, experts in dims[2].
func IsExpertTensor(name string, dims []int64) bool {
	return strings.Contains(name, "_exps") && len(dims) == 3
}

// header is the decoded fixed header.
type header struct {
	version, flags, size, align uint32
	dataOff, dataSize           uint64
	metaOff, metaSize           uint64
	indexOff, indexSize         uint64
	metaCRC, indexCRC           uint32
}

func (h *header) encode() []byte {
	b := make([]byte, HeaderSize)
	le := binary.LittleEndian
	copy(b, Magic)
	le.PutUint32(b[4:], h.version)
	le.PutUint32(b[8:], h.flags)
	le.PutUint32(b[12:], h.size)
	le.PutUint32(b[16:], h.align)
	le.PutUint64(b[24:], h.dataOff)
	le.PutUint64(b[32:], h.dataSize)
	le.PutUint64(b[40:], h.metaOff)
	le.PutUint64(b[48:], h.metaSize)
	le.PutUint64(b[56:], h.indexOff)
	le.PutUint64(b[64:], h.indexSize)
	le.PutUint32(b[72:], h.metaCRC)
	le.PutUint32(b[76:], h.indexCRC)
	le.PutUint32(b[HeaderSize-4:], Checksum(b[:HeaderSize-4]))
	return b
}

// decodeHeader checks the fixed header of a file of the given size. It does
// not look at the sections' contents.
func decodeHeader(b []byte, fileSize int64) (*header, error) {
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("file is %d bytes, shorter than the %d-byte .jlm header (truncated?)", len(b), HeaderSize)
	}
	if string(b[:4]) != Magic {
		if allZero(b[:HeaderSize]) {
			return nil, fmt.Errorf("header is all zeros: the writer never finished this file (interrupted conversion?)")
		}
		return nil, fmt.Errorf("not a .jlm file: magic is %q, want %q", b[:4], Magic)
	}
	le := binary.LittleEndian
	h := &header{
		version: le.Uint32(b[4:]), flags: le.Uint32(b[8:]), size: le.Uint32(b[12:]), align: le.Uint32(b[16:]),
		dataOff: le.Uint64(b[24:]), dataSize: le.Uint64(b[32:]),
		metaOff: le.Uint64(b[40:]), metaSize: le.Uint64(b[48:]),
		indexOff: le.Uint64(b[56:]), indexSize: le.Uint64(b[64:]),
		metaCRC: le.Uint32(b[72:]), indexCRC: le.Uint32(b[76:]),
	}
	if h.version != Version {
		return nil, fmt.Errorf("unsupported .jlm version %d (this build reads version %d)", h.version, Version)
	}
	if h.flags != 0 {
		return nil, fmt.Errorf("header flags %#x name features this build does not know (upgrade jitllm)", h.flags)
	}
	if h.size < HeaderSize || h.size > Alignment || int64(h.size) > int64(len(b)) {
		return nil, fmt.Errorf("header size %d is outside [%d, %d] or past the end of the %d-byte file", h.size, HeaderSize, Alignment, len(b))
	}
	if got, want := Checksum(b[:h.size-4]), le.Uint32(b[h.size-4:]); got != want {
		return nil, fmt.Errorf("header checksum mismatch at offset %d: stored %08x, computed %08x (file corrupted)", h.size-4, want, got)
	}
	if h.align < Alignment || h.align > 1<<30 || h.align&(h.align-1) != 0 {
		return nil, fmt.Errorf("header alignment %d is not a power of two in [%d, 1 GiB]", h.align, Alignment)
	}
	if h.dataOff < uint64(h.size) || h.dataOff%uint64(h.align) != 0 {
		return nil, fmt.Errorf("data section offset %d is inside the header or not a multiple of the alignment %d", h.dataOff, h.align)
	}
	size := uint64(fileSize)
	for _, s := range []struct {
		name      string
		off, size uint64
	}{{"data", h.dataOff, h.dataSize}, {"metadata", h.metaOff, h.metaSize}, {"index", h.indexOff, h.indexSize}} {
		if s.off > size || s.size > size-s.off {
			return nil, fmt.Errorf("%s section [%d, +%d) runs past the end of the %d-byte file (truncated?)", s.name, s.off, s.size, size)
		}
	}
	if h.metaOff < h.dataOff+h.dataSize || h.indexOff < h.metaOff+h.metaSize {
		return nil, fmt.Errorf("sections overlap or are out of order: data [%d, +%d), metadata [%d, +%d), index [%d, +%d)",
			h.dataOff, h.dataSize, h.metaOff, h.metaSize, h.indexOff, h.indexSize)
	}
	return h, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
