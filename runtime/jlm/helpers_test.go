package jlm

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/meta"
)

// memOut is an in-memory Output.
type memOut struct{ b []byte }

func (m *memOut) Write(p []byte) (int, error) { m.b = append(m.b, p...); return len(p), nil }
func (m *memOut) WriteAt(p []byte, off int64) (int, error) {
	if need := int(off) + len(p); need > len(m.b) {
		m.b = append(m.b, make([]byte, need-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

type spec struct {
	name string
	typ  quant.Type
	dims []int64
}

// synthetic writes a small file: an F32 vector, a Q8_0 matrix and a 3-D
// expert tensor, and returns it with each tensor's bytes.
func synthetic(t testing.TB) ([]byte, map[string][]byte, *meta.Map) {
	md := &meta.Map{}
	md.Set("general.architecture", meta.Str("test"))
	md.Set("tokenizer.ggml.tokens", meta.Strs([]string{"a", "b", "c"}))
	md.Set("tokenizer.chat_template", meta.Str("{{ x }}"))
	specs := []spec{
		{"norm.weight", quant.F32, []int64{8}},
		{"blk.0.attn_q.weight", quant.Q8_0, []int64{64, 3}},
		{"blk.0.ffn_up_exps.weight", quant.F16, []int64{4, 3, 5}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	out := &memOut{}
	w, err := NewWriter(out)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for _, s := range specs {
		size, err := tensorSize(s.name, s.typ, s.dims)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		data[s.name] = b
		if err := w.WriteTensor(s.name, s.typ, s.dims, bytes.NewReader(b), make([]byte, 7)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(md); err != nil {
		t.Fatal(err)
	}
	return out.b, data, md
}

// fromGGUF writes the metadata of a GGUF file and those of its tensors of
// at most maxSize bytes as a .jlm image.
func fromGGUF(t testing.TB, path string, maxSize int64) []byte {
	g, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	out := &memOut{}
	w, err := NewWriter(out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range g.Tensors {
		gt := &g.Tensors[i]
		if gt.Size > maxSize {
			continue
		}
		if err := w.WriteTensor(gt.Name, gt.Type, gt.Dims, g.Reader(gt), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(g.Meta); err != nil {
		t.Fatal(err)
	}
	return out.b
}

// assemble builds a file from raw section bytes with correct checksums, so
// a test can reach the checks behind them.
func assemble(data, metaSec, indexSec []byte) []byte {
	h := header{version: Version, size: HeaderSize, align: Alignment, dataOff: Alignment}
	h.dataSize = uint64(len(data))
	h.metaOff = h.dataOff + h.dataSize
	h.metaSize = uint64(len(metaSec))
	h.indexOff = h.metaOff + h.metaSize
	h.indexSize = uint64(len(indexSec))
	h.metaCRC, h.indexCRC = Checksum(metaSec), Checksum(indexSec)
	b := make([]byte, Alignment)
	copy(b, h.encode())
	b = append(b, data...)
	b = append(b, metaSec...)
	return append(b, indexSec...)
}

func encodeMeta(md *meta.Map) []byte {
	var buf bytes.Buffer
	w := &meta.Writer{W: &buf}
	w.U64(uint64(md.Len()))
	meta.WriteKVs(w, md)
	return buf.Bytes()
}

func encodeIndex(ts []TensorInfo) []byte {
	var buf bytes.Buffer
	writeIndex(&meta.Writer{W: &buf}, ts)
	return buf.Bytes()
}

// fixChecksums rewrites the header's checksums to match b's contents where
// the header's fields allow, so mutated inputs get past them.
func fixChecksums(b []byte) {
	if len(b) < HeaderSize || string(b[:4]) != Magic {
		return
	}
	le := binary.LittleEndian
	n := uint64(len(b))
	for _, f := range []struct{ off, size, crc int }{{40, 48, 72}, {56, 64, 76}} {
		o, s := le.Uint64(b[f.off:]), le.Uint64(b[f.size:])
		if o <= n && s <= n-o {
			le.PutUint32(b[f.crc:], Checksum(b[o:o+s]))
		}
	}
	if hs := uint64(le.Uint32(b[12:])); hs >= HeaderSize && hs <= n && hs <= Alignment {
		le.PutUint32(b[hs-4:], Checksum(b[:hs-4]))
	}
}
