package server

import (
	"encoding/json"
	"testing"
)

// A server with -lookup answers as one without, for greedy and seeded
// completions and n choices, and counts the guesses it kept in /metrics.
func TestLookupSpeculation(t *testing.T) {
	_, plain := newTest(t, Config{MaxSessions: 2})
	_, spec := newTest(t, Config{MaxSessions: 2, Lookup: 3, DraftMax: 4})
	bodies := []string{
		`{"model":"stories","prompt":"Once upon a time, there was a girl. Once upon a time","max_tokens":48,"temperature":0}`,
		`{"model":"stories","prompt":"The dog ran and ran and ran","max_tokens":40,"temperature":0.7,"seed":3,"n":2}`,
	}
	type completion struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	for _, body := range bodies {
		var want, got completion
		for _, c := range []struct {
			url string
			out *completion
		}{{plain.URL, &want}, {spec.URL, &got}} {
			resp, b := post(t, c.url+"/v1/completions", body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			if err := json.Unmarshal(b, c.out); err != nil {
				t.Fatal(err)
			}
		}
		if len(got.Choices) != len(want.Choices) || len(got.Choices) == 0 {
			t.Fatalf("%d choices, want %d", len(got.Choices), len(want.Choices))
		}
		for i := range want.Choices {
			if got.Choices[i] != want.Choices[i] {
				t.Errorf("%s choice %d: with lookup %+v, without %+v", body, i, got.Choices[i], want.Choices[i])
			}
		}
	}
	kept := metric(t, spec.URL, `jitllm_draft_tokens_total{kept="true",model="stories"}`)
	missed := metric(t, spec.URL, `jitllm_draft_tokens_total{kept="false",model="stories"}`)
	if kept == 0 || missed+kept == 0 {
		t.Errorf("/metrics: %g guesses kept, %g not", kept, missed)
	}
	if n := metric(t, plain.URL, `jitllm_draft_tokens_total{kept="true",model="stories"}`); n != 0 {
		t.Errorf("a server without -lookup counted %g kept guesses", n)
	}
	t.Logf("%g guesses kept, %g not", kept, missed)
}
