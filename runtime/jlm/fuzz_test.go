package jlm

import (
	"testing"

	"github.com/jitllm/jitllm/runtime/meta"
)

// FuzzParse feeds Parse arbitrary images: each input as is, and again with
// its checksums repaired so mutations reach the index and metadata checks.
// Whatever parses must be safe to use.
func FuzzParse(f *testing.F) {
	b, _, _ := synthetic(f)
	f.Add(b)
	// A real model's metadata and small tensors; big seeds slow the fuzzer
	// down to a crawl.
	f.Add(fromGGUF(f, "../../testdata/derived/stories260K-Q4_0.gguf", 1024))
	out := &memOut{}
	w, _ := NewWriter(out)
	md := &meta.Map{}
	md.Set("tokenizer.ggml.tokens", meta.Strs([]string{"<s>", "</s>"}))
	w.Finish(md) // vocab-only: no tensors
	f.Add(out.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		use(t, b)
		c := append([]byte(nil), b...)
		fixChecksums(c)
		use(t, c)
	})
}

func use(t *testing.T, b []byte) {
	f, err := Parse(b)
	if err != nil {
		if err.Error() == "" {
			t.Fatal("empty error")
		}
		return
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if int64(len(f.Data(ti))) != ti.Size {
			t.Fatalf("tensor %q: %d bytes, index says %d", ti.Name, len(f.Data(ti)), ti.Size)
		}
		f.Verify(ti)
		for e := range ti.Experts {
			r, err := f.Expert(ti, e)
			if err != nil || r.Offset < ti.Offset || r.Offset+r.Size > ti.Offset+ti.Size {
				t.Fatalf("tensor %q expert %d: %v %+v", ti.Name, e, err, r)
			}
		}
	}
	for _, kv := range f.Meta.All() {
		_ = kv.Value.String()
	}
}
