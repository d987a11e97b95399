package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/capabilities"
	"github.com/jitllm/jitllm/runtime/discover"
)

func TestCapabilitiesCommand(t *testing.T) {
	var out bytes.Buffer
	if err := runCapabilities(&out, []string{"-json"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), capabilities.JSON()) {
		t.Error("capabilities -json differs from capabilities.JSON()")
	}
	out.Reset()
	if err := runCapabilities(&out, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| llama |") {
		t.Errorf("text output lacks the llama family:\n%s", out.String())
	}
}

func TestDoctorCommand(t *testing.T) {
	var out bytes.Buffer
	if err := runDoctor(&out, []string{"-json", "../../testdata/stories260K.gguf"}); err != nil {
		t.Fatalf("stories260K cannot run: %v\n%s", err, out.String())
	}
	var r discover.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Schema != discover.ReportSchema || !r.OK || r.Model == nil || !r.Model.CanRun || r.Host.OS == "" {
		t.Errorf("report %+v", r)
	}

	out.Reset()
	err := runDoctor(&out, []string{"-ctx", "1000000000", "../../testdata/stories260K.gguf"})
	if !errors.Is(err, errCannotRun) {
		t.Fatalf("a context of 10⁹ positions: err %v", err)
	}
	if s := out.String(); !strings.Contains(s, "model needs") || !strings.Contains(s, "→") || !strings.Contains(s, "cannot run here") {
		t.Errorf("text output:\n%s", s)
	}

	out.Reset()
	if err := runDoctor(&out, nil); err != nil {
		t.Fatalf("doctor without a model: %v", err)
	}
	if !strings.Contains(out.String(), "devices") {
		t.Errorf("text output:\n%s", out.String())
	}
}

// doctor -cache-type prices the KV cache of that type and names a model
// that cannot keep it.
func TestDoctorCacheType(t *testing.T) {
	kv := map[string]discover.Estimate{}
	for _, typ := range []string{"f16", "q8_0"} {
		var out bytes.Buffer
		if err := runDoctor(&out, []string{"-json", "-ctx", "256", "-cache-type", typ, tiny256}); err != nil {
			t.Fatalf("%s: %v\n%s", typ, err, out.String())
		}
		var r discover.Report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Model == nil || r.Model.Estimate == nil {
			t.Fatalf("%s: %v\n%s", typ, err, out.String())
		}
		kv[typ] = *r.Model.Estimate
	}
	if f, q := kv["f16"], kv["q8_0"]; f.KVType != "f16" || q.KVType != "q8_0" || q.KV*64 != f.KV*34 || f.Total-q.Total != f.KV-q.KV {
		t.Errorf("estimates %+v (f16) and %+v (q8_0)", f, q)
	}
	var out bytes.Buffer
	if err := runDoctor(&out, []string{"-cache-type", "q8_0", stories}); !errors.Is(err, errCannotRun) || !strings.Contains(out.String(), "multiple of 32") {
		t.Errorf("q8_0 on stories260K: %v\n%s", err, out.String())
	}
	if err := runDoctor(&out, []string{"-cache-type", "q5_1", stories}); err == nil || !strings.Contains(err.Error(), `--cache-type "q5_1"`) {
		t.Errorf("an unknown cache type: %v", err)
	}
}
