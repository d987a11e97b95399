package jlm

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
)

func TestTruncatedEverywhere(t *testing.T) {
	b, _, _ := synthetic(t)
	for n := 0; n < len(b); n++ {
		if _, err := Parse(b[:n]); err == nil {
			t.Fatalf("file truncated to %d of %d bytes parsed", n, len(b))
		}
	}
	// Through Open too, for the short-file path.
	path := filepath.Join(t.TempDir(), "short.jlm")
	os.WriteFile(path, b[:50], 0o644)
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "short.jlm") {
		t.Fatalf("Open of a 50-byte file: %v", err)
	}
}

func TestHostileHeader(t *testing.T) {
	good, _, _ := synthetic(t)
	le := binary.LittleEndian
	cases := []struct {
		name, want string
		mut        func(b []byte)
		fix        bool // recompute checksums after the mutation
	}{
		{"bad magic", "not a .jlm file", func(b []byte) { copy(b, "GGUF") }, false},
		{"zero header", "never finished", func(b []byte) { clear(b[:HeaderSize]) }, false},
		{"version", "unsupported .jlm version 2", func(b []byte) { le.PutUint32(b[4:], 2) }, true},
		{"flags", "flags", func(b []byte) { le.PutUint32(b[8:], 1) }, true},
		{"header size", "header size", func(b []byte) { le.PutUint32(b[12:], 8) }, true},
		{"header crc", "header checksum", func(b []byte) { b[30] ^= 1 }, false},
		{"alignment", "alignment", func(b []byte) { le.PutUint32(b[16:], 100) }, true},
		{"unaligned data", "data section offset", func(b []byte) { le.PutUint64(b[24:], 4097) }, true},
		{"data past end", "data section", func(b []byte) { le.PutUint64(b[32:], 1<<62) }, true},
		{"meta past end", "metadata section", func(b []byte) { le.PutUint64(b[40:], uint64(len(b))) }, true},
		{"index past end", "index section", func(b []byte) { le.PutUint64(b[64:], 1<<40) }, true},
		{"sections overlap", "overlap", func(b []byte) { le.PutUint64(b[40:], le.Uint64(b[40:])-8) }, true},
		{"meta crc", "metadata section at offset", func(b []byte) { b[le.Uint64(b[40:])+9] ^= 1 }, false},
		{"index crc", "index section at offset", func(b []byte) { b[le.Uint64(b[56:])+9] ^= 1 }, false},
	}
	for _, c := range cases {
		b := append([]byte(nil), good...)
		c.mut(b)
		if c.fix {
			fixChecksums(b)
		}
		_, err := Parse(b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// base returns two valid F32 tensors of 4096 bytes and their data section.
func base() ([]TensorInfo, []byte) {
	data := make([]byte, 2*Alignment)
	for i := range data {
		data[i] = byte(i * 7)
	}
	ts := []TensorInfo{
		{Name: "a", Type: quant.F32, Dims: []int64{1024}, Offset: Alignment, Size: Alignment},
		{Name: "b", Type: quant.F32, Dims: []int64{1024}, Offset: 2 * Alignment, Size: Alignment},
	}
	for i := range ts {
		ts[i].CRC = Checksum(data[i*Alignment : (i+1)*Alignment])
	}
	return ts, data
}

func TestHostileIndex(t *testing.T) {
	md := &meta.Map{}
	md.Set("general.architecture", meta.Str("x"))
	ms := encodeMeta(md)
	ts, data := base()
	if _, err := Parse(assemble(data, ms, encodeIndex(ts))); err != nil {
		t.Fatalf("base file: %v", err)
	}
	le := binary.LittleEndian
	cases := []struct {
		name, want string
		mut        func(ts []TensorInfo)
	}{
		{"overlap", "overlap", func(ts []TensorInfo) { ts[1].Offset = ts[0].Offset }},
		{"unaligned", "not a multiple of the alignment", func(ts []TensorInfo) { ts[1].Offset += 32 }},
		{"past end", "outside the data section", func(ts []TensorInfo) { ts[1].Offset = 3 * Alignment }},
		{"far past end", "outside the data section", func(ts []TensorInfo) { ts[1].Offset = 1 << 62 }},
		{"before data", "outside the data section", func(ts []TensorInfo) { ts[0].Offset = 0 }},
		{"size mismatch", "takes 4096", func(ts []TensorInfo) { ts[0].Size = 4000 }},
		{"unknown type", "unknown ggml type", func(ts []TensorInfo) { ts[0].Type = 99 }},
		{"unknown layout", "layout 7", func(ts []TensorInfo) { ts[0].Layout = 7 }},
		{"rank 0", "0 dimensions", func(ts []TensorInfo) { ts[0].Name, ts[0].Dims = strings.Repeat("a", 64), nil }},
		{"rank 5", "5 dimensions", func(ts []TensorInfo) { ts[0].Dims = []int64{1024, 1, 1, 1, 1} }},
		{"zero dim", "dimension 1 is 0", func(ts []TensorInfo) { ts[0].Dims = []int64{1024, 0} }},
		{"huge dims", "overflows", func(ts []TensorInfo) { ts[0].Dims = []int64{1 << 40, 1 << 40} }},
		{"negative dim", "dimension 0", func(ts []TensorInfo) { ts[0].Dims = []int64{-1} }},
		{"duplicate name", "duplicate tensor name", func(ts []TensorInfo) { ts[1].Name = "a" }},
		{"long name", "over the 1024 limit", func(ts []TensorInfo) { ts[0].Name = strings.Repeat("n", 2000) }},
		{"experts on a plain tensor", "lists 2 experts", func(ts []TensorInfo) { ts[0].Experts = make([]Range, 2) }},
		{"wrong expert range", "is not its slice", func(ts []TensorInfo) {
			ts[0].Name, ts[0].Dims = "x_exps", []int64{256, 2, 2}
			ts[0].Experts = []Range{{Offset: Alignment, Size: 2048}, {Offset: Alignment + 1024, Size: 2048}}
		}},
	}
	for _, c := range cases {
		ts, data := base()
		c.mut(ts)
		_, err := Parse(assemble(data, ms, encodeIndex(ts)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}

	// Raw sections: counts no section could hold, and trailing bytes.
	huge := make([]byte, 8)
	le.PutUint64(huge, 1<<60)
	raw := []struct {
		name, want string
		meta, idx  []byte
	}{
		{"absurd tensor count", "index claims", ms, huge},
		{"absurd metadata count", "metadata entries cannot fit", huge, encodeIndex(nil)},
		{"metadata trailing bytes", "unexpected bytes after the last metadata", append(append([]byte(nil), ms...), 0), encodeIndex(nil)},
		{"index trailing bytes", "unexpected bytes after the last index", ms, append(encodeIndex(nil), 1, 2)},
		{"empty index", "index tensor count", ms, nil},
		{"absurd expert count", "claims 4096 experts", ms, expertCount(4096)},
	}
	for _, c := range raw {
		_, err := Parse(assemble(make([]byte, 4096), c.meta, c.idx))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// expertCount is an index of one I8 expert tensor of n experts that
// claims n expert ranges but holds none.
func expertCount(n int64) []byte {
	b := encodeIndex([]TensorInfo{{Name: "e_exps", Type: quant.I8, Dims: []int64{1, 1, n}, Offset: Alignment, Size: n}})
	binary.LittleEndian.PutUint64(b[len(b)-8:], uint64(n))
	return b
}
