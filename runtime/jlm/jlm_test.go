package jlm

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/kernels/quant"
	"github.com/jitllm/jitllm/runtime/meta"
)

func TestRoundTrip(t *testing.T) {
	b, data, md := synthetic(t)
	path := filepath.Join(t.TempDir(), "x.jlm")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !f.Meta.Equal(md) {
		t.Errorf("metadata differs after the round trip")
	}
	if len(f.Tensors) != len(data) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(data))
	}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if ti.Offset%Alignment != 0 {
			t.Errorf("%s offset %d not aligned", ti.Name, ti.Offset)
		}
		if !bytes.Equal(f.Data(ti), data[ti.Name]) {
			t.Errorf("%s bytes differ", ti.Name)
		}
		if err := f.Verify(ti); err != nil {
			t.Error(err)
		}
	}
	if _, ok := f.Tensor("nope"); ok {
		t.Error("found a tensor that is not there")
	}
}

func TestExperts(t *testing.T) {
	b, data, _ := synthetic(t)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("blk.0.ffn_up_exps.weight")
	if len(ti.Experts) != 5 {
		t.Fatalf("%d experts, want 5", len(ti.Experts))
	}
	whole := data[ti.Name]
	es := len(whole) / 5
	for i := 0; i < 5; i++ {
		r, err := f.Expert(ti, i)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Slice(r), whole[i*es:(i+1)*es]) {
			t.Errorf("expert %d bytes differ", i)
		}
		if err := f.VerifyRange(r); err != nil {
			t.Error(err)
		}
	}
	if _, err := f.Expert(ti, 5); err == nil {
		t.Error("expert 5 of 5: no error")
	}
	q, _ := f.Tensor("blk.0.attn_q.weight")
	if _, err := f.Expert(q, 0); err == nil {
		t.Error("expert of a non-expert tensor: no error")
	}
}

func TestVerifyDetectsFlip(t *testing.T) {
	b, _, _ := synthetic(t)
	for _, name := range []string{"norm.weight", "blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight"} {
		f, err := Parse(append([]byte(nil), b...))
		if err != nil {
			t.Fatal(err)
		}
		ti, _ := f.Tensor(name)
		f.b[ti.Offset+ti.Size-1] ^= 0x10
		if err := f.Verify(ti); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Errorf("%s: flipped byte not detected: %v", name, err)
		}
		if len(ti.Experts) > 0 {
			last := ti.Experts[len(ti.Experts)-1]
			if f.VerifyRange(last) == nil || f.VerifyRange(ti.Experts[0]) != nil {
				t.Errorf("%s: expert checksums do not isolate the flipped byte", name)
			}
		}
	}
}

func TestWriterRejects(t *testing.T) {
	w, _ := NewWriter(&memOut{})
	if _, err := w.Create("x", quant.Q8_0, []int64{31}); err == nil {
		t.Error("row of 31 Q8_0 values accepted")
	}
	w, _ = NewWriter(&memOut{})
	tw, err := w.Create("x", quant.F32, []int64{4})
	if err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 8))
	if err := tw.Close(); err == nil {
		t.Error("short tensor accepted")
	}
	if err := w.Finish(&meta.Map{}); err == nil {
		t.Error("Finish after a failed tensor succeeded")
	}
	w, _ = NewWriter(&memOut{})
	tw, _ = w.Create("x", quant.F32, []int64{1})
	if _, err := tw.Write(make([]byte, 5)); err == nil {
		t.Error("oversize write accepted")
	}
	w, _ = NewWriter(&memOut{})
	w.WriteTensor("x", quant.F32, []int64{1}, bytes.NewReader(make([]byte, 4)), nil)
	if _, err := w.Create("x", quant.F32, []int64{1}); err == nil {
		t.Error("duplicate name accepted")
	}
}

// An unfinished file (header never written) must not open.
func TestUnfinishedRejected(t *testing.T) {
	out := &memOut{}
	w, _ := NewWriter(out)
	w.WriteTensor("x", quant.F32, []int64{4}, bytes.NewReader(make([]byte, 16)), nil)
	if _, err := Parse(out.b); err == nil || !strings.Contains(err.Error(), "never finished") {
		t.Fatalf("unfinished file: %v", err)
	}
}
