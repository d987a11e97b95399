package server

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
)

// Config.KVType is checked when a model is added (the CPU engine is only
// made on the first request): an unknown type, a model whose heads hold no
// whole q8_0 block, and a CUDA device, which keeps f16, are refused.
func TestKVTypeRefused(t *testing.T) {
	for _, c := range []struct {
		cfg        Config
		model, err string
	}{
		{Config{KVType: "q4_0"}, "stories260K.gguf", `"q4_0"`},
		{Config{KVType: exec.KVQ8_0}, "stories260K.gguf", "head dim"},
		{Config{KVType: exec.KVQ8_0, Devices: "cuda"}, "synthetic/tiny256-Q4_K_M.gguf", "f16 KV cache"},
	} {
		s := New(c.cfg)
		m, err := generate.Open(td + c.model)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AddModel("m", m); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%+v on %s: %v, want an error with %s", c.cfg, c.model, err, c.err)
		}
		m.Close()
		s.Close(context.Background())
	}
}

// A q8_0 server's sessions keep a q8_0 cache: it answers, and its memory
// estimate, capacity metric and engine all count 34 bytes a 32 values
// where f16 counts 64.
func TestKVTypeQ8Serves(t *testing.T) {
	const ctx = 64
	kv := map[string]int64{}
	for _, typ := range []string{exec.KVF16, exec.KVQ8_0} {
		s := New(Config{Threads: 1, Context: ctx, MaxSessions: 2, KVType: typ})
		m, err := generate.Open(td + "synthetic/tiny256-Q4_K_M.gguf")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AddModel("tiny", m); err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.Handler())
		resp, b := post(t, hs.URL+"/v1/completions", `{"model":"tiny","prompt":" t1 t2 t3","max_tokens":8,"temperature":0}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", typ, resp.StatusCode, b)
		}
		e, _ := s.model("tiny")
		if l := e.pool.engine.KVLayout(); l.Type != typ {
			t.Errorf("%s: the engine keeps %q", typ, l.Type)
		}
		got := int64(metric(t, hs.URL, `jitllm_kv_capacity_bytes{model="tiny"}`))
		if got != e.pool.engine.KVBytes() || got != e.mem.KV || e.kvTok*2*ctx != got {
			t.Errorf("%s: capacity %d, engine %d, estimate %d, %d bytes a position", typ, got, e.pool.engine.KVBytes(), e.mem.KV, e.kvTok)
		}
		kv[typ] = got
		hs.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.Close(cctx)
		cancel()
	}
	if kv[exec.KVQ8_0]*64 != kv[exec.KVF16]*34 {
		t.Errorf("KV bytes %d in f16, %d in q8_0", kv[exec.KVF16], kv[exec.KVQ8_0])
	}
}
