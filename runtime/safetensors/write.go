package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

// WriteTensor is one tensor for Write.
type WriteTensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

// Write writes a spec-conformant file: header JSON (keys in the given
// order, "__metadata__" first when metadata is non-nil), padded with spaces
// so the data section starts at a multiple of 8, then the tensors' bytes in
// the given order, contiguous.
//
// Inputs are checked the way Parse checks files, so whatever Write produces
// Parse accepts. Metadata keys are written sorted so output is reproducible.
func Write(w io.Writer, ts []WriteTensor, metadata map[string]string) error {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if metadata != nil {
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return fmt.Errorf("safetensors: write: metadata %q: not valid UTF-8", k)
			}
		}
		sep()
		writeJSONString(&hdr, metadataKey)
		hdr.WriteString(":{")
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			writeJSONString(&hdr, k)
			hdr.WriteByte(':')
			writeJSONString(&hdr, metadata[k])
		}
		hdr.WriteByte('}')
	}
	seen := make(map[string]bool, len(ts))
	var off int64
	for _, t := range ts {
		switch {
		case t.Name == "":
			return errors.New("safetensors: write: empty tensor name")
		case t.Name == metadataKey:
			return fmt.Errorf("safetensors: write: tensor name %q is reserved", t.Name)
		case !utf8.ValidString(t.Name):
			// JSON would turn bad bytes into U+FFFD, so the name read back
			// would differ and two names could collide.
			return fmt.Errorf("safetensors: write: tensor name %q is not valid UTF-8", t.Name)
		case seen[t.Name]:
			return fmt.Errorf("safetensors: write: duplicate tensor %q", t.Name)
		}
		seen[t.Name] = true
		n, err := byteSize(t.DType, t.Shape)
		if err != nil {
			return fmt.Errorf("safetensors: write: tensor %q: %w", t.Name, err)
		}
		if n != int64(len(t.Data)) {
			return fmt.Errorf("safetensors: write: tensor %q: shape %v of %s needs %d bytes, have %d", t.Name, t.Shape, t.DType, n, len(t.Data))
		}
		sep()
		writeJSONString(&hdr, t.Name)
		hdr.WriteString(`:{"dtype":`)
		writeJSONString(&hdr, t.DType)
		hdr.WriteString(`,"shape":[`)
		for i, d := range t.Shape {
			if i > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(strconv.FormatInt(d, 10))
		}
		hdr.WriteString(`],"data_offsets":[`)
		hdr.WriteString(strconv.FormatInt(off, 10))
		hdr.WriteByte(',')
		hdr.WriteString(strconv.FormatInt(off+n, 10))
		hdr.WriteString("]}")
		off += n
	}
	hdr.WriteByte('}')
	// Pad so DataAt = 8 + len(header) is 8-aligned: readers that map the
	// file can then view F64/I64 data in place.
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	if hdr.Len() > MaxHeader {
		return fmt.Errorf("safetensors: write: header is %d bytes, over the %d-byte limit", hdr.Len(), MaxHeader)
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr.Bytes()); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := w.Write(t.Data); err != nil {
			return fmt.Errorf("safetensors: write: tensor %q: %w", t.Name, err)
		}
	}
	return nil
}

// writeJSONString appends s as a JSON string; json.Marshal of a string
// cannot fail, and callers have already rejected invalid UTF-8.
func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}
