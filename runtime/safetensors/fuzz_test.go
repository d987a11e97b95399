package safetensors

import (
	"bytes"
	"encoding/binary"
	"sort"
	"testing"
)

// FuzzParse checks properties that must hold for any input, independent of
// how Parse is written: it never panics, and anything it accepts describes
// tensors inside the data section that share no bytes.
func FuzzParse(f *testing.F) {
	valid := writeFile(f, sample(), map[string]string{"format": "pt"})
	f.Add(valid)
	f.Add(writeFile(f, nil, nil))
	f.Add(valid[:len(valid)-1])
	f.Add(valid[:20])
	f.Add([]byte{})
	f.Add(raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3))
	f.Add(raw(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[1,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1))
	f.Add(raw(`{"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}}`, 4))
	f.Add(raw(`{"__metadata__":{"k":"v","k":"w"}}   `, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := parseBytes(b)
		if err != nil {
			return
		}
		if len(b) < 8 {
			t.Fatalf("accepted a %d-byte file", len(b))
		}
		if n := binary.LittleEndian.Uint64(b); file.DataAt != 8+int64(n) || file.DataAt > file.Size || file.Size != int64(len(b)) {
			t.Fatalf("DataAt %d, Size %d for a %d-byte file with header length %d", file.DataAt, file.Size, len(b), n)
		}
		ts := append([]Tensor(nil), file.Tensors...)
		sort.Slice(ts, func(i, j int) bool { return ts[i].Offset < ts[j].Offset })
		var end int64 // end of the furthest non-empty tensor so far
		names := map[string]bool{}
		for _, tt := range ts {
			if tt.Name == "" || names[tt.Name] {
				t.Fatalf("empty or repeated name %q", tt.Name)
			}
			names[tt.Name] = true
			if tt.Size < 0 || tt.Offset < file.DataAt || tt.Offset > file.Size || tt.Size > file.Size-tt.Offset {
				t.Fatalf("tensor %q [%d, +%d) outside data section [%d, %d)", tt.Name, tt.Offset, tt.Size, file.DataAt, file.Size)
			}
			es, ok := DTypeSize(tt.DType)
			if !ok {
				t.Fatalf("tensor %q: unknown dtype %q accepted", tt.Name, tt.DType)
			}
			n := int64(es)
			for _, d := range tt.Shape {
				if d < 0 {
					t.Fatalf("tensor %q: negative dim in %v", tt.Name, tt.Shape)
				}
				n *= d // cannot wrap when Size matched the checked product
			}
			if n != tt.Size {
				t.Fatalf("tensor %q: %s %v is %d bytes, Size %d", tt.Name, tt.DType, tt.Shape, n, tt.Size)
			}
			if tt.Size == 0 {
				continue
			}
			if tt.Offset < end {
				t.Fatalf("tensor %q at %d overlaps bytes up to %d", tt.Name, tt.Offset, end)
			}
			end = tt.Offset + tt.Size
		}
		// Whatever parses must survive a rewrite and parse the same.
		wts := make([]WriteTensor, len(file.Tensors))
		for i, tt := range file.Tensors {
			wts[i] = WriteTensor{Name: tt.Name, DType: tt.DType, Shape: tt.Shape, Data: b[tt.Offset : tt.Offset+tt.Size]}
		}
		var buf bytes.Buffer
		if err := Write(&buf, wts, file.Metadata); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		again, err := parseBytes(buf.Bytes())
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if len(again.Tensors) != len(file.Tensors) || len(again.Metadata) != len(file.Metadata) {
			t.Fatalf("reparse: %d tensors / %d metadata, want %d / %d", len(again.Tensors), len(again.Metadata), len(file.Tensors), len(file.Metadata))
		}
	})
}
