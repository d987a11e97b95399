package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Chat streaming framing, byte for byte: "data: {json}\n\n" chunks, the
// role first, content deltas, finish_reason on the last choice chunk, the
// usage chunk, then "data: [DONE]\n\n".
func TestChatSSEFraming(t *testing.T) {
	_, hs := newTest(t, Config{})
	resp, body := post(t, hs.URL+"/v1/chat/completions",
		`{"model":"stories","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":10,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := parseSSE(t, body)
	if evs[len(evs)-1].data != "[DONE]" || !strings.HasSuffix(string(body), "\n\ndata: [DONE]\n\n") {
		t.Fatalf("no final [DONE]: %q", tail(body))
	}
	type chunk struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Role    *string `json:"role"`
				Content *string `json:"content"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	var chunks []chunk
	for _, ev := range evs[:len(evs)-1] {
		if ev.name != "" {
			t.Errorf("event name %q in an OpenAI stream", ev.name)
		}
		var c chunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("%v: %s", err, ev.data)
		}
		if len(chunks) > 0 && c.ID != chunks[0].ID || c.Object != "chat.completion.chunk" {
			t.Errorf("chunk %s", ev.data)
		}
		chunks = append(chunks, c)
	}
	first, last, usageChunk := chunks[0], chunks[len(chunks)-2], chunks[len(chunks)-1]
	if r := first.Choices[0].Delta.Role; r == nil || *r != "assistant" {
		t.Errorf("first chunk has no role: %+v", first)
	}
	var text strings.Builder
	for i, c := range chunks[1 : len(chunks)-2] {
		if len(c.Choices) != 1 || c.Choices[0].Delta.Role != nil || c.Choices[0].FinishReason != nil || c.Choices[0].Delta.Content == nil {
			t.Errorf("content chunk %d: %+v", i, c)
			continue
		}
		text.WriteString(*c.Choices[0].Delta.Content)
	}
	if f := last.Choices[0].FinishReason; f == nil || *f != "length" {
		t.Errorf("last choice chunk: %+v", last)
	}
	if len(usageChunk.Choices) != 0 || usageChunk.Usage == nil || usageChunk.Usage.CompletionTokens != 10 ||
		usageChunk.Usage.TotalTokens != usageChunk.Usage.PromptTokens+10 {
		t.Errorf("usage chunk: %+v", usageChunk)
	}
	// Same text as the non-streamed answer.
	_, b := post(t, hs.URL+"/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":10,"temperature":0}`)
	var full struct {
		Choices []struct{ Message struct{ Content string } }
	}
	json.Unmarshal(b, &full)
	if full.Choices[0].Message.Content != text.String() {
		t.Errorf("stream %q, non-stream %q", text.String(), full.Choices[0].Message.Content)
	}
}

// Anthropic's event sequence, exactly.
func TestMessagesSSEEvents(t *testing.T) {
	_, hs := newTest(t, Config{})
	resp, body := post(t, hs.URL+"/v1/messages",
		`{"model":"stories","max_tokens":8,"temperature":0,"system":"Tell a story.","messages":[{"role":"user","content":"Once upon a time"}],"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	evs := parseSSE(t, body)
	var names []string
	for _, ev := range evs {
		var v struct{ Type string }
		if err := json.Unmarshal([]byte(ev.data), &v); err != nil || v.Type != ev.name {
			t.Errorf("event %q carries type %q (%v)", ev.name, v.Type, err)
		}
		if len(names) == 0 || names[len(names)-1] != ev.name {
			names = append(names, ev.name)
		}
	}
	want := "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Errorf("events %v, want %s", names, want)
	}
	var md struct {
		Delta struct {
			StopReason string `json:"stop_reason"`
		}
		Usage struct {
			OutputTokens int `json:"output_tokens"`
		}
	}
	json.Unmarshal([]byte(evs[len(evs)-2].data), &md)
	if md.Delta.StopReason != "max_tokens" || md.Usage.OutputTokens != 8 {
		t.Errorf("message_delta %s", evs[len(evs)-2].data)
	}
}

func TestErrorShapes(t *testing.T) {
	_, hs := newTest(t, Config{Context: 64})
	long := strings.Repeat("Once upon a time ", 40)
	cases := []struct {
		path, body string
		status     int
		substr     string
	}{
		{"/v1/chat/completions", `{"model":`, 400, "malformed JSON"},
		{"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "nope"},
		{"/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x"}],"tools":[]}`, 400, `tools: empty array`},
		{"/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, 400, `response_format.type must be`},
		{"/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x","name":"bob"}]}`, 400, `unsupported field "messages[0].name"`},
		{"/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"` + long + `"}]}`, 400, "context"},
		{"/v1/chat/completions", `{"model":"stories","messages":[{"role":"user","content":"x"}],"temperature":3}`, 400, "temperature"},
		{"/v1/completions", `not json`, 400, "malformed JSON"},
		{"/v1/completions", `{"model":"stories","prompt":"` + long + `"}`, 400, "context"},
		{"/v1/completions", `{"model":"stories","prompt":"x","suffix":"y"}`, 400, `unsupported field "suffix"`},
		{"/v1/completions", `{"model":"stories","prompt":"x","logit_bias":{}}`, 400, `unsupported field "logit_bias"`},
	}
	for _, c := range cases {
		resp, b := post(t, hs.URL+c.path, c.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != c.status || !strings.Contains(e.Error.Message, c.substr) || e.Error.Type == "" {
			t.Errorf("%s %.60s: %d %s", c.path, c.body, resp.StatusCode, b)
		}
	}
	anth := []struct {
		body   string
		status int
		typ    string
		substr string
	}{
		{`{`, 400, "invalid_request_error", "malformed JSON"},
		{`{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, 404, "not_found_error", "nope"},
		{`{"model":"stories","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "max_tokens"},
		{`{"model":"stories","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}]}`, 400, "invalid_request_error", `tools.0.input_schema: field required`},
		{`{"model":"stories","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, 400, "invalid_request_error", "unsupported"},
		{`{"model":"stories","max_tokens":5,"messages":[{"role":"user","content":"` + long + `"}]}`, 400, "invalid_request_error", "context"},
	}
	for _, c := range anth {
		resp, b := post(t, hs.URL+"/v1/messages", c.body)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != c.status || e.Type != "error" || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, c.substr) {
			t.Errorf("messages %.60s: %d %s", c.body, resp.StatusCode, b)
		}
	}
}

// Streaming never shows text that could still become a stop sequence,
// and the stop text itself is never returned.
func TestStopSequences(t *testing.T) {
	_, hs := newTest(t, Config{})
	ref := refs(t)[0]
	text := ref.GeneratedText
	for _, stop := range []string{"little girl", "Lily. She", "park", "zzz-never"} {
		want := text
		if i := strings.Index(text, stop); i >= 0 {
			want = text[:i]
		}
		body := fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":64,"temperature":0,"stop":[%q,"xyzzy"]}`, ref.Prompt, stop)
		_, b := post(t, hs.URL+"/v1/completions", body)
		var res struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			}
		}
		json.Unmarshal(b, &res)
		if res.Choices[0].Text != want {
			t.Errorf("stop %q: %q, want %q", stop, res.Choices[0].Text, want)
		}
		_, b = post(t, hs.URL+"/v1/completions", strings.Replace(body, `"temperature":0`, `"temperature":0,"stream":true`, 1))
		var got strings.Builder
		for _, ev := range parseSSE(t, b) {
			if ev.data == "[DONE]" {
				continue
			}
			var c struct{ Choices []struct{ Text string } }
			json.Unmarshal([]byte(ev.data), &c)
			got.WriteString(c.Choices[0].Text)
			// What is shown so far must be a prefix of the answer.
			if !strings.HasPrefix(want, got.String()) {
				t.Fatalf("stop %q: stream showed %q, answer %q", stop, got.String(), want)
			}
		}
		if got.String() != want {
			t.Errorf("stop %q: streamed %q, want %q", stop, got.String(), want)
		}
	}
}

func TestStopperHoldsBack(t *testing.T) {
	s := stopper{stops: []string{"<end>", "ab"}}
	var shown strings.Builder
	for _, piece := range []string{"x", "a", "<", "e", "n", "d", ">", "q"} {
		out, stop := s.add(piece)
		shown.WriteString(out)
		if stop {
			break
		}
	}
	if shown.String() != "xa" || s.matched != "<end>" {
		t.Errorf("shown %q matched %q", shown.String(), s.matched)
	}
	s = stopper{stops: []string{"<end>"}}
	out, _ := s.add("hello <en")
	if out != "hello " {
		t.Errorf("held %q", out)
	}
	if f := s.flush(); f != "<en" {
		t.Errorf("flush %q", f)
	}
}

// With every session busy, a request waits for its bounded time and then
// gets 503 with Retry-After; beyond the queue it gets 429.
func TestBusy(t *testing.T) {
	s, hs := newTest(t, Config{MaxSessions: 1, MaxQueue: 1, QueueWait: 300 * time.Millisecond})
	m, _ := s.model("stories")
	sess, err := m.pool.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"stories","prompt":"Once","max_tokens":2}`
	var wg sync.WaitGroup
	wg.Add(1)
	var first *http.Response
	go func() {
		defer wg.Done()
		first, _ = post(t, hs.URL+"/v1/completions", body)
	}()
	// Wait until the first request is queued, then overflow the queue.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.pool.mu.Lock()
		w := m.pool.waiting
		m.pool.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("request never queued")
		}
	}
	resp, b := post(t, hs.URL+"/v1/completions", body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("over the queue: %d %s", resp.StatusCode, b)
	}
	wg.Wait()
	if first.StatusCode != 503 || first.Header.Get("Retry-After") == "" {
		t.Errorf("queued past its wait: %d", first.StatusCode)
	}
	m.pool.release(sess)
	if resp, b := post(t, hs.URL+"/v1/completions", body); resp.StatusCode != 200 {
		t.Errorf("after release: %d %s", resp.StatusCode, b)
	}
}

// A client that goes away mid-stream cancels its generation and its
// session goes back to the pool.
func TestClientDisconnect(t *testing.T) {
	s, hs := newTest(t, Config{MaxSessions: 1})
	m, _ := s.model("stories")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/completions",
		strings.NewReader(`{"model":"stories","prompt":"Once upon a time","max_tokens":2000,"stream":true,"temperature":1,"seed":3}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	readSSE(resp.Body, func(sseEvent) bool { n++; return n < 3 })
	cancel()
	resp.Body.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if len(m.pool.sem) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session was not released after the client left")
		}
	}
	if resp, b := post(t, hs.URL+"/v1/completions", `{"model":"stories","prompt":"Once","max_tokens":2}`); resp.StatusCode != 200 {
		t.Errorf("after disconnect: %d %s", resp.StatusCode, b)
	}
}

func TestMetrics(t *testing.T) {
	_, hs := newTest(t, Config{})
	post(t, hs.URL+"/v1/completions", `{"model":"stories","prompt":"Once","max_tokens":4,"temperature":0}`)
	post(t, hs.URL+"/v1/completions", `{"model":"nope","prompt":"Once"}`)
	resp, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`jitllm_requests_total{endpoint="completions",status="200"} 1`,
		`jitllm_requests_total{endpoint="completions",status="404"} 1`,
		`jitllm_completion_tokens_total{model="stories"} 4`,
		`jitllm_prompt_tokens_total{model="stories"}`,
		`jitllm_time_to_first_token_seconds_count{model="stories"} 1`,
		`jitllm_inter_token_latency_seconds_count{model="stories"} 3`,
		`jitllm_queue_depth{model="stories"} 0`,
		`jitllm_sessions_in_use{model="stories"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A bounded load test on loopback: 16 concurrent streams, 200 requests,
// every one answered with an intact stream holding llama.cpp's greedy text,
// and no goroutine left behind.
func TestLoad(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("load test: skipped with -short and under the race detector (kernels run ~50x slower)")
	}
	before := runtime.NumGoroutine()
	func() {
		srv, hs := newTest(t, Config{MaxSessions: 4, QueueWait: 20 * time.Second, MaxQueue: 64})
		defer hs.Close()
		// The model's batching engine lives as long as the model: close it too.
		defer srv.Close(context.Background())
		rs := refs(t)
		const total, conc, maxTok = 200, 16, 16
		want := make([]string, len(rs))
		for i, r := range rs {
			_, b := post(t, hs.URL+"/v1/completions", fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":0}`, r.Prompt, maxTok))
			var res struct{ Choices []struct{ Text string } }
			json.Unmarshal(b, &res)
			want[i] = res.Choices[0].Text
			if !strings.HasPrefix(r.GeneratedText, want[i]) || want[i] == "" {
				t.Fatalf("%q: %q is not a prefix of llama.cpp's %q", r.Prompt, want[i], r.GeneratedText)
			}
		}
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
		defer client.CloseIdleConnections()
		jobs := make(chan int)
		errs := make(chan error, total)
		var done sync.WaitGroup
		start := time.Now()
		for w := 0; w < conc; w++ {
			done.Add(1)
			go func() {
				defer done.Done()
				for j := range jobs {
					errs <- loadOne(client, hs.URL, j, rs[j%len(rs)].Prompt, want[j%len(rs)], maxTok)
				}
			}()
		}
		for j := 0; j < total; j++ {
			jobs <- j
		}
		close(jobs)
		done.Wait()
		close(errs)
		n := 0
		for err := range errs {
			n++
			if err != nil {
				t.Error(err)
			}
		}
		if n != total {
			t.Errorf("%d answers for %d requests", n, total)
		}
		t.Logf("%d streamed requests, %d at a time, in %v", total, conc, time.Since(start))
	}()
	settleGoroutines(t, before)
}

func loadOne(c *http.Client, url string, j int, prompt, want string, maxTok int) error {
	chat := j%2 == 1
	var body, path string
	if chat {
		path = "/v1/chat/completions"
		body = fmt.Sprintf(`{"model":"stories","messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0,"stream":true}`, prompt, maxTok)
	} else {
		path = "/v1/completions"
		body = fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":0,"stream":true}`, prompt, maxTok)
	}
	resp, err := c.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("request %d: %v", j, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		return fmt.Errorf("request %d: %d %v %s", j, resp.StatusCode, err, b)
	}
	if !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		return fmt.Errorf("request %d: stream not terminated: %q", j, tail(b))
	}
	var text strings.Builder
	finish := ""
	for _, block := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(block, "data: ")
		if !ok || strings.Contains(data, "\n") {
			return fmt.Errorf("request %d: bad SSE block %q", j, block)
		}
		if data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text         string
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil || len(c.Choices) != 1 {
			return fmt.Errorf("request %d: bad chunk %q", j, data)
		}
		text.WriteString(c.Choices[0].Text + c.Choices[0].Delta.Content)
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	if finish != "length" {
		return fmt.Errorf("request %d: finish %q", j, finish)
	}
	if !chat && text.String() != want {
		return fmt.Errorf("request %d: %q, want %q", j, text.String(), want)
	}
	if chat && text.Len() == 0 {
		return fmt.Errorf("request %d: empty chat answer", j)
	}
	return nil
}

// GET /v1/capabilities serves the generated table, and that table lists
// every route the server registers.
func TestCapabilitiesEndpoint(t *testing.T) {
	var got struct {
		Endpoints []struct{ Method, Path string }
	}
	srv := httptest.NewServer(New(Config{}).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/capabilities")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range got.Endpoints {
		listed[e.Method+" "+e.Path] = true
	}
	for _, rt := range routes {
		if !listed[rt.method+" "+rt.path] {
			t.Errorf("%s %s is served but not in the capabilities table (run go generate ./...)", rt.method, rt.path)
		}
	}
}
