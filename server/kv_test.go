package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/jitllm/jitllm/runtime/exec"
	"github.com/jitllm/jitllm/runtime/generate"
)

type completion struct {
	Choices []struct {
		Index int    `json:"index"`
		Text  string `json:"text"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

func complete(t *testing.T, url, body string) completion {
	t.Helper()
	resp, b := post(t, url+"/v1/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
	}
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// metric reads one sample of /metrics (0 when absent).
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// n choices share one prefill: the prompt's rows are fed once, greedy
// choices are identical, and seeded choices are what separate requests
// with seeds seed+i give, streamed or not.
func TestNChoicesOnePrefill(t *testing.T) {
	s, hs := newTest(t, Config{MaxSessions: 3})
	m, _ := s.model("stories")
	const prompt = "Once upon a time, there was a"
	ids, err := m.m.Tok.Encode(prompt, true, false)
	if err != nil {
		t.Fatal(err)
	}
	const T = 12
	first := complete(t, hs.URL, `{"model":"stories","prompt":"Lily","max_tokens":2}`) // make the engine
	_ = first
	before := m.pool.engine.Stats().Rows
	reused := metric(t, hs.URL, `jitllm_prefix_tokens_reused_total{model="stories"}`)
	c := complete(t, hs.URL, fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":0,"n":3}`, prompt, T))
	// The choices forked from the prefill count its tokens as reused; the
	// first may have found BOS cached from the request before.
	cached := int(metric(t, hs.URL, `jitllm_prefix_tokens_reused_total{model="stories"}`)-reused) - 2*len(ids)
	if fed, want := m.pool.engine.Stats().Rows-before, int64(len(ids)-cached+3*(T-1)); fed != want || cached < 0 || cached > 1 {
		t.Errorf("fed %d rows (%d prompt tokens cached); one prefill of %d and 3×%d decodes are %d", fed, cached, len(ids)-cached, T-1, want)
	}
	if len(c.Choices) != 3 || c.Choices[0].Text == "" || c.Choices[0].Text != c.Choices[1].Text || c.Choices[1].Text != c.Choices[2].Text {
		t.Fatalf("greedy choices %+v", c.Choices)
	}
	for i, ch := range c.Choices {
		if ch.Index != i {
			t.Errorf("choice %d has index %d", i, ch.Index)
		}
	}
	if c.Usage.PromptTokens != len(ids) || c.Usage.CompletionTokens != 3*T {
		t.Errorf("usage %+v", c.Usage)
	}

	body := fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":1,"seed":11,"n":3}`, prompt, T)
	a := complete(t, hs.URL, body)
	if a.Choices[0].Text == a.Choices[1].Text && a.Choices[1].Text == a.Choices[2].Text {
		t.Errorf("seeded choices are all equal: %+v", a.Choices)
	}
	if b := complete(t, hs.URL, body); fmt.Sprint(b.Choices) != fmt.Sprint(a.Choices) {
		t.Errorf("seeded choices do not repeat:\n%+v\n%+v", a.Choices, b.Choices)
	}
	for i := range 3 {
		one := complete(t, hs.URL, fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":1,"seed":%d}`, prompt, T, 11+i))
		if one.Choices[0].Text != a.Choices[i].Text {
			t.Errorf("choice %d: %q, alone with seed %d %q", i, a.Choices[i].Text, 11+i, one.Choices[0].Text)
		}
	}
	// Streamed: every index's text is the same.
	resp, raw := post(t, hs.URL+"/v1/completions", strings.Replace(body, `"n":3`, `"n":3,"stream":true`, 1))
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d %s", resp.StatusCode, raw)
	}
	got := make([]string, 3)
	for _, ev := range parseSSE(t, raw) {
		if ev.data == "[DONE]" {
			continue
		}
		var ch completion
		if err := json.Unmarshal([]byte(ev.data), &ch); err != nil {
			t.Fatal(err)
		}
		for _, x := range ch.Choices {
			got[x.Index] += x.Text
		}
	}
	for i := range got {
		if got[i] != a.Choices[i].Text {
			t.Errorf("streamed choice %d: %q, want %q", i, got[i], a.Choices[i].Text)
		}
	}
	// More choices than slots: the rest run after the first three.
	c5 := complete(t, hs.URL, fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":1,"seed":11,"n":5}`, prompt, T))
	for i := range 3 {
		if c5.Choices[i].Text != a.Choices[i].Text {
			t.Errorf("n=5 choice %d: %q, want %q", i, c5.Choices[i].Text, a.Choices[i].Text)
		}
	}
	one := complete(t, hs.URL, fmt.Sprintf(`{"model":"stories","prompt":%q,"max_tokens":%d,"temperature":1,"seed":15}`, prompt, T))
	if len(c5.Choices) != 5 || c5.Choices[4].Text != one.Choices[0].Text {
		t.Errorf("n=5 choice 4: %+v, alone %q", c5.Choices, one.Choices[0].Text)
	}
}

// A request sharing a prefix with what an idle slot holds reuses its KV
// (counted in /metrics) and answers what a cold server answers.
func TestPrefixReuse(t *testing.T) {
	_, coldS := newTest(t, Config{MaxSessions: 2})
	_, warmS := newTest(t, Config{MaxSessions: 2})
	cold, warm := coldS.URL, warmS.URL
	chat := func(url, user string) string {
		resp, b := post(t, url+"/v1/chat/completions", fmt.Sprintf(`{"model":"stories","max_tokens":24,"temperature":0,
			"messages":[{"role":"system","content":"Tell a short story about a girl named Lily and her dog."},{"role":"user","content":%q}]}`, user))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		var res struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		return res.Choices[0].Message.Content
	}
	want := chat(cold, "The park")
	if metric(t, cold, `jitllm_prefix_tokens_reused_total{model="stories"}`) != 0 {
		t.Error("a cold server reused a prefix")
	}
	chat(warm, "Once upon a time")
	got := chat(warm, "The park")
	if got != want {
		t.Errorf("warm %q, cold %q", got, want)
	}
	reused := metric(t, warm, `jitllm_prefix_tokens_reused_total{model="stories"}`)
	if reused < 10 {
		t.Errorf("reused %g prefix tokens; the system prompt is longer", reused)
	}
	if c := metric(t, warm, `jitllm_kv_cached_bytes{model="stories"}`); c <= 0 {
		t.Errorf("kv cached %g bytes", c)
	}
}

// A shared prefix outlives its slot: once a request reused it, it is kept
// as a snapshot, and restored for a later request after the only slot has
// run something else; the answer is still the cold one.
func TestHotPrefixSnapshot(t *testing.T) {
	_, coldS := newTest(t, Config{})
	s, warmS := newTest(t, Config{})
	m, _ := s.model("stories")
	const sys = "Tell a short story about a girl named Lily, her little dog Max and the big red ball in the park."
	body := func(user string) string {
		return fmt.Sprintf(`{"model":"stories","max_tokens":16,"temperature":0,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, sys, user)
	}
	chat := func(url, body string) string {
		resp, b := post(t, url+"/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		var res struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		return res.Choices[0].Message.Content
	}
	want := chat(coldS.URL, body("The park"))
	warm := warmS.URL
	chat(warm, body("Once upon a time"))
	chat(warm, body("A cat")) // reuses the system prompt: now a hot prefix
	hot := metric(t, warm, `jitllm_kv_prefix_snapshot_bytes{model="stories"}`)
	if hot <= 0 {
		t.Fatalf("no hot prefix kept (%g bytes)", hot)
	}
	complete(t, warm, `{"model":"stories","prompt":"Zebras eat grass every single day","max_tokens":4}`) // the slot moves on
	ids, _ := m.m.Tok.Encode("system: "+sys, true, false)
	if n := m.pool.idle[0].CommonPrefix(ids); n >= minHot {
		t.Fatalf("the slot still holds %d tokens of the system prompt", n)
	}
	before := metric(t, warm, `jitllm_prefix_tokens_reused_total{model="stories"}`)
	if got := chat(warm, body("The park")); got != want {
		t.Errorf("from the hot prefix %q, cold %q", got, want)
	}
	if d := metric(t, warm, `jitllm_prefix_tokens_reused_total{model="stories"}`) - before; d < minHot {
		t.Errorf("reused %g tokens after the slot moved on", d)
	}
}

// A request whose prompt plus max_tokens exceeds the context is refused at
// once, streamed or not; one that fits exactly runs. The KV gauges report
// the engine's memory and return to no reservation.
func TestKVAdmission(t *testing.T) {
	const ctx = 64
	s, hs := newTest(t, Config{Context: ctx, MaxSessions: 2})
	m, _ := s.model("stories")
	ids, _ := m.m.Tok.Encode("Once upon a time", true, false)
	room := ctx - len(ids)
	for _, c := range []struct {
		max    int
		stream bool
		status int
	}{{room, false, 200}, {room + 1, false, 400}, {room + 1, true, 400}, {room, true, 200}} {
		body := fmt.Sprintf(`{"model":"stories","prompt":"Once upon a time","max_tokens":%d,"temperature":1,"seed":1,"stream":%v}`, c.max, c.stream)
		resp, b := post(t, hs.URL+"/v1/completions", body)
		if resp.StatusCode != c.status {
			t.Errorf("max_tokens %d (stream %v): %d %s", c.max, c.stream, resp.StatusCode, b)
		}
		if c.status == 400 && !strings.Contains(string(b), "max_tokens") {
			t.Errorf("refusal does not name max_tokens: %s", b)
		}
	}
	resp, b := post(t, hs.URL+"/v1/messages", fmt.Sprintf(`{"model":"stories","max_tokens":%d,"messages":[{"role":"user","content":"x"}]}`, ctx))
	if resp.StatusCode != 400 || !strings.Contains(string(b), "context") {
		t.Errorf("messages over the context: %d %s", resp.StatusCode, b)
	}
	bpt := m.pool.engine.KVLayout().BytesPerToken()
	if got := metric(t, hs.URL, `jitllm_kv_capacity_bytes{model="stories"}`); got != float64(2*ctx*bpt) || int64(got) != m.pool.engine.KVBytes() {
		t.Errorf("kv capacity %g, want %d", got, 2*ctx*bpt)
	}
	if got := metric(t, hs.URL, `jitllm_kv_reserved_bytes{model="stories"}`); got != 0 {
		t.Errorf("kv reserved %g with no request in flight", got)
	}
	// While two sessions are held no choice can take a third slot, and the
	// reservations never pass the capacity.
	a, err := m.pool.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.pool.reserve(a, 10)
	if x := m.pool.tryExtra(3, ctx); len(x) != 1 {
		t.Errorf("tryExtra gave %d slots of the 1 free", len(x))
	} else {
		if got := metric(t, hs.URL, `jitllm_kv_reserved_bytes{model="stories"}`); got != float64((10+ctx)*bpt) {
			t.Errorf("kv reserved %g, want %d", got, (10+ctx)*bpt)
		}
		// Both slots held, each a whole context: the capacity exactly.
		m.pool.reserve(x[0], ctx)
		m.pool.reserve(a, ctx)
		if got := metric(t, hs.URL, `jitllm_kv_reserved_bytes{model="stories"}`); got != float64(2*ctx*bpt) {
			t.Errorf("kv reserved %g, want the capacity %d", got, 2*ctx*bpt)
		}
		if y := m.pool.tryExtra(1, 1); len(y) != 0 {
			t.Errorf("tryExtra over-committed: %d slots", len(y))
		}
		m.pool.release(x[0])
	}
	m.pool.release(a)
	if got := metric(t, hs.URL, `jitllm_kv_reserved_bytes{model="stories"}`); got != 0 {
		t.Errorf("kv reserved %g after every release", got)
	}
}

// /v1/embeddings through the OpenAI SDK and raw HTTP: the mean-pooled,
// unit-length final hidden state, equal to a direct computation.
func TestEmbeddings(t *testing.T) {
	_, hs := newTest(t, Config{MaxSessions: 2})
	m, err := generate.Open(td + "stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	direct, err := m.NewSession(exec.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	want := func(text string, dims int) []float64 {
		ids, err := m.Tok.Encode(text, true, false)
		if err != nil {
			t.Fatal(err)
		}
		v, err := direct.Embed(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		v = v[:dims]
		var sq float64
		for _, x := range v {
			sq += float64(x) * float64(x)
		}
		out := make([]float64, dims)
		for i, x := range v {
			out[i] = float64(x) / math.Sqrt(sq)
		}
		return out
	}
	near := func(what string, got, want []float64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		var sq float64
		for i := range got {
			sq += got[i] * got[i]
			if math.Abs(got[i]-want[i]) > 1e-4 {
				t.Fatalf("%s: value %d is %g, want %g", what, i, got[i], want[i])
			}
		}
		if math.Abs(sq-1) > 1e-4 {
			t.Errorf("%s: squared length %g", what, sq)
		}
	}
	c := openaiClient(hs.URL)
	texts := []string{"Once upon a time", "The little dog ran to the park."}
	res, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "stories",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Data) != 2 || res.Model != "stories" || res.Object != "list" {
		t.Fatalf("response %+v", res)
	}
	tokens := 0
	for i, d := range res.Data {
		near(fmt.Sprintf("input %d", i), d.Embedding, want(texts[i], len(d.Embedding)))
		ids, _ := m.Tok.Encode(texts[i], true, false)
		tokens += len(ids)
	}
	if res.Usage.PromptTokens != int64(tokens) || res.Usage.TotalTokens != int64(tokens) {
		t.Errorf("usage %+v, want %d tokens", res.Usage, tokens)
	}
	// One string, with dimensions: truncated, then unit length again.
	res, err = c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "stories", Dimensions: openai.Int(16),
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(texts[0])}})
	if err != nil {
		t.Fatal(err)
	}
	near("dimensions 16", res.Data[0].Embedding, want(texts[0], 16))
	// Token ids, one array and several.
	ids, _ := m.Tok.Encode(texts[1], true, false)
	ids64 := make([]int64, len(ids))
	for i, id := range ids {
		ids64[i] = int64(id)
	}
	res, err = c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{Model: "stories",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{ids64, ids64}}})
	if err != nil {
		t.Fatal(err)
	}
	near("token arrays", res.Data[1].Embedding, want(texts[1], len(res.Data[1].Embedding)))

	// Raw HTTP: base64 is the float32 little-endian bytes.
	tj, _ := json.Marshal(ids)
	resp, b := post(t, hs.URL+"/v1/embeddings", `{"model":"stories","input":`+string(tj)+`,"encoding_format":"base64"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var r64 struct {
		Data []struct {
			Object    string `json:"object"`
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r64); err != nil || len(r64.Data) != 1 || r64.Data[0].Object != "embedding" {
		t.Fatalf("%v %s", err, b)
	}
	raw, err := base64.StdEncoding.DecodeString(r64.Data[0].Embedding)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float64, len(raw)/4)
	for i := range got {
		got[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
	}
	near("base64", got, want(texts[1], len(got)))

	for _, c := range []struct{ body, substr string }{
		{`{"model":"stories"}`, `is required`},
		{`{"model":"stories","input":""}`, "empty"},
		{`{"model":"stories","input":[]}`, "1 to 2048"},
		{`{"model":"stories","input":[1,99999]}`, "outside the vocabulary"},
		{`{"model":"stories","input":{"a":1}}`, "input must be"},
		{`{"model":"stories","input":"x","encoding_format":"hex"}`, "encoding_format"},
		{`{"model":"stories","input":"x","dimensions":0}`, "dimensions"},
		{`{"model":"stories","input":"x","dimensions":100000}`, "dimensions"},
		{`{"model":"stories","input":"x","truncate":true}`, `unsupported field \"truncate\"`},
		{`{"model":"stories","input":"` + strings.Repeat("Once upon a time ", 700) + `"}`, "context"},
	} {
		resp, b := post(t, hs.URL+"/v1/embeddings", c.body)
		if resp.StatusCode != 400 || !strings.Contains(string(b), c.substr) {
			t.Errorf("%.80s: %d %s", c.body, resp.StatusCode, b)
		}
	}
	if resp, _ := post(t, hs.URL+"/v1/embeddings", `{"model":"nope","input":"x"}`); resp.StatusCode != 404 {
		t.Errorf("unknown model: %d", resp.StatusCode)
	}
}
