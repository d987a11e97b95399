package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// fuzzPaths are the endpoints FuzzRequests posts to, by the input's first
// byte.
var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/embeddings"}

// FuzzRequests posts arbitrary bodies to the generation and embedding
// endpoints of a server holding stories260K (a 256-position context bounds
// every generation): whatever the body, the server answers without
// panicking or hanging, with 200 or with a 4xx whose body is the API's
// error object (OpenAI's {"error": {message, type}}, Anthropic's
// {"type": "error", "error": {type, message}}); never a 5xx. The seeds are
// valid requests of each kind and feature (streaming, n, logprobs, stop,
// tools, structured output) and broken ones.
func FuzzRequests(f *testing.F) {
	user := `"messages":[{"role":"user","content":"Once upon a time"}]`
	seeds := []struct {
		path int
		body string
	}{
		{0, `{"model":"stories",` + user + `,"max_tokens":4}`},
		{0, `{"model":"stories",` + user + `,"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`},
		{0, `{"model":"stories",` + user + `,"max_tokens":3,"n":2,"logprobs":true,"top_logprobs":2,"seed":7,"temperature":0.8}`},
		{0, `{"model":"stories",` + user + `,"max_tokens":6,"stop":["the","."]}`},
		{0, `{"model":"stories",` + user + `,"max_tokens":8,"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}}}}`},
		{0, `{"model":"stories",` + user + `,"max_tokens":8,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}],"tool_choice":"required"}`},
		{0, `{"model":"stories","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":"x"}]}`},
		{1, `{"model":"stories","prompt":"Once upon a time","max_tokens":4,"logprobs":2}`},
		{1, `{"model":"stories","prompt":"x","max_tokens":2,"stream":true,"stop":"y"}`},
		{2, `{"model":"stories","max_tokens":4,` + user + `}`},
		{2, `{"model":"stories","max_tokens":4,"stream":true,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop_sequences":["a"]}`},
		{2, `{"model":"stories","max_tokens":4,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}`},
		{3, `{"model":"stories","input":["Once upon a time","x"]}`},
		{3, `{"model":"stories","input":[[1,2],[3]],"encoding_format":"base64"}`},
		{0, `{"model":`}, {1, `[]`}, {2, `null`}, {3, `{"model":"stories","input":1e999}`},
		{0, `{"model":"stories",` + user + `,"max_tokens":-1}`}, {0, `{"model":"stories","messages":[]}`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.path), s.body)
	}
	_, hs := newTest(f, Config{Context: 256})
	f.Fuzz(func(t *testing.T, path uint8, body string) {
		p := fuzzPaths[int(path)%len(fuzzPaths)]
		resp, b := post(t, hs.URL+p, body)
		switch c := resp.StatusCode; {
		case c == 200:
			if !json.Valid(b) && !strings.HasPrefix(string(b), "data:") && !strings.HasPrefix(string(b), "event:") {
				t.Fatalf("%s %q: 200 with a body neither JSON nor SSE: %.200s", p, body, b)
			}
		case c >= 400 && c < 500:
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%s %q: %d without the API's error object: %.200s", p, body, c, b)
			}
		default:
			t.Fatalf("%s %q: status %d: %.200s", p, body, c, b)
		}
	})
}
