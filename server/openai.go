package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/sample"
	"github.com/jitllm/jitllm/runtime/template"
)

// Fields the OpenAI endpoints accept; any other key is refused by name.
var (
	chatFields = set("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
		"presence_penalty", "frequency_penalty", "n", "stream", "stream_options", "stop", "logprobs", "top_logprobs",
		"user", "top_k", "min_p", "repeat_penalty", "tools", "tool_choice", "parallel_tool_calls", "response_format")
	completionFields = set("model", "prompt", "max_tokens", "temperature", "top_p", "seed", "presence_penalty",
		"frequency_penalty", "n", "stream", "stream_options", "stop", "logprobs", "echo", "best_of", "user",
		"top_k", "min_p", "repeat_penalty")
	chatMessageFields = set("role", "content", "tool_calls", "tool_call_id")
)

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeOpenAIError(w http.ResponseWriter, e *apiError) {
	typ, code := "invalid_request_error", any(nil)
	switch e.kind {
	case "not_found":
		code = "model_not_found"
	case "rate_limit", "overloaded":
		typ = "server_error"
		code = "server_busy"
	case "server":
		typ = "server_error"
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	var param any
	if e.param != "" {
		param = e.param
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "param": param, "code": code}})
}

// asAPIError maps an internal error to an answer.
func asAPIError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, errQueueFull):
		return &apiError{status: http.StatusTooManyRequests, kind: "rate_limit", msg: "too many requests are queued for this model; retry later", retryAfter: 1}
	case errors.Is(err, errBusy), errors.Is(err, errClosed):
		return &apiError{status: http.StatusServiceUnavailable, kind: "overloaded", msg: err.Error() + "; retry later", retryAfter: 1}
	case errors.Is(err, errContext), errors.Is(err, generate.ErrContext):
		return badRequest("messages", "%v", err)
	}
	return &apiError{status: http.StatusInternalServerError, kind: "server", msg: err.Error()}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	var data []any
	for _, id := range s.Models() {
		if m, ok := s.model(id); ok {
			data = append(data, modelObject(m))
		}
	}
	if data == nil {
		data = []any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func modelObject(m *model) map[string]any {
	return map[string]any{"id": m.id, "object": "model", "created": m.created, "owned_by": "jitllm"}
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	m, ok := s.model(r.PathValue("id"))
	if !ok {
		writeOpenAIError(w, notFound(r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, modelObject(m))
}

func notFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, kind: "not_found", param: "model", msg: fmt.Sprintf("the model %q does not exist; GET /v1/models lists the loaded ones", id)}
}

// common holds the fields both OpenAI endpoints share.
type common struct {
	m            *model
	maxTokens    int
	params       sample.Params
	n            int
	stream       bool
	includeUsage bool
	stops        []string
	logprobs     bool
	topLogprobs  int
	tools        *toolSetup // tools, tool_choice, response_format (chat); nil = none
}

func (s *Server) parseCommon(obj map[string]json.RawMessage, c *common, maxTokenKeys ...string) *apiError {
	var id string
	if _, e := field(obj, "model", &id); e != nil {
		return e
	}
	if id == "" {
		return badRequest("model", "the field \"model\" is required")
	}
	m, ok := s.model(id)
	if !ok {
		return notFound(id)
	}
	c.m = m
	for _, k := range maxTokenKeys {
		var n int
		if ok, e := field(obj, k, &n); e != nil {
			return e
		} else if ok {
			if n < 1 {
				return badRequest(k, "%s must be at least 1", k)
			}
			c.maxTokens = n
		}
	}
	p := sample.DefaultParams()
	p.Temperature, p.TopK, p.TopP, p.MinP, p.RepeatLastN = 1, 0, 1, 0, -1
	var f float64
	if ok, e := field(obj, "temperature", &f); e != nil {
		return e
	} else if ok {
		if !(f >= 0 && f <= 2) {
			return badRequest("temperature", "temperature must be in [0, 2]")
		}
		p.Temperature = float32(f)
	}
	if ok, e := field(obj, "top_p", &f); e != nil {
		return e
	} else if ok {
		if !(f > 0 && f <= 1) {
			return badRequest("top_p", "top_p must be in (0, 1]")
		}
		p.TopP = float32(f)
	}
	if ok, e := field(obj, "min_p", &f); e != nil {
		return e
	} else if ok {
		if !(f >= 0 && f <= 1) {
			return badRequest("min_p", "min_p must be in [0, 1]")
		}
		p.MinP = float32(f)
	}
	if ok, e := field(obj, "repeat_penalty", &f); e != nil {
		return e
	} else if ok {
		if !(f > 0) || math.IsInf(f, 0) {
			return badRequest("repeat_penalty", "repeat_penalty must be > 0")
		}
		p.RepeatPenalty = float32(f)
	}
	for _, k := range []string{"presence_penalty", "frequency_penalty"} {
		if ok, e := field(obj, k, &f); e != nil {
			return e
		} else if ok {
			if !(f >= -2 && f <= 2) {
				return badRequest(k, "%s must be in [-2, 2]", k)
			}
			if k == "presence_penalty" {
				p.PresencePenalty = float32(f)
			} else {
				p.FrequencyPenalty = float32(f)
			}
		}
	}
	var k int
	if ok, e := field(obj, "top_k", &k); e != nil {
		return e
	} else if ok {
		if k < 0 {
			return badRequest("top_k", "top_k must be >= 0")
		}
		p.TopK = k
	}
	var seed int64
	if ok, e := field(obj, "seed", &seed); e != nil {
		return e
	} else if ok {
		p.Seed = uint64(seed)
	} else {
		p.Seed = mrand.Uint64()
	}
	c.params = p
	c.n = 1
	if ok, e := field(obj, "n", &c.n); e != nil {
		return e
	} else if ok && (c.n < 1 || c.n > 16) {
		return badRequest("n", "n must be in [1, 16]")
	}
	if _, e := field(obj, "stream", &c.stream); e != nil {
		return e
	}
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if ok, e := field(obj, "stream_options", &so); e != nil {
		return e
	} else if ok {
		if !c.stream {
			return badRequest("stream_options", "stream_options is only allowed with stream: true")
		}
		c.includeUsage = so.IncludeUsage
	}
	var e *apiError
	if c.stops, e = stringOrList(obj, "stop"); e != nil {
		return e
	}
	var user string
	if _, e := field(obj, "user", &user); e != nil {
		return e
	}
	return nil
}

// chatMessages decodes OpenAI chat messages.
func chatMessages(raw json.RawMessage) ([]template.Message, *apiError) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return nil, badRequest("messages", "messages must be a non-empty array")
	}
	msgs := make([]template.Message, 0, len(list))
	callNames := map[string]string{} // tool call id -> function name, for tool messages
	for i, m := range list {
		path := fmt.Sprintf("messages[%d]", i)
		obj, e := parseObject(m, path, chatMessageFields)
		if e != nil {
			return nil, e
		}
		var role string
		if _, e := field(obj, "role", &role); e != nil {
			return nil, e
		}
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system"
		case "function":
			return nil, unsupported(path + ".role=" + role)
		default:
			return nil, badRequest(path+".role", "%s: unknown role %q", path, role)
		}
		text, e := textContent(obj["content"], path+".content", nil)
		if e != nil {
			return nil, e
		}
		msg := template.Message{Role: role, Content: text}
		if raw, ok := obj["tool_calls"]; ok && string(raw) != "null" {
			if role != "assistant" {
				return nil, badRequest(path+".tool_calls", "%s.tool_calls: only assistant messages carry tool calls", path)
			}
			if msg.Fields, e = assistantToolCalls(raw, path+".tool_calls", callNames); e != nil {
				return nil, e
			}
		}
		var callID string
		if _, e := field(obj, "tool_call_id", &callID); e != nil {
			return nil, e
		}
		switch {
		case role == "tool" && callID == "":
			return nil, badRequest(path+".tool_call_id", "%s.tool_call_id is required in a tool message", path)
		case role == "tool":
			msg.Fields = toolFields(callID, callNames[callID])
		case callID != "":
			return nil, badRequest(path+".tool_call_id", "%s.tool_call_id: only tool messages answer a call", path)
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// chatPrompt renders msgs with the model's template (or the fallback) and
// tokenizes the result.
func (s *Server) chatPrompt(m *model, msgs []template.Message, tools json.RawMessage) ([]int32, *apiError) {
	opt := template.ChatOptions{BOS: m.bos, EOS: m.eos, AddGenerationPrompt: true, Now: s.cfg.Now, Tools: tools}
	var text string
	switch {
	case m.tmplErr != nil:
		return nil, &apiError{status: http.StatusInternalServerError, kind: "server", msg: fmt.Sprintf("the model's chat template does not compile: %v", m.tmplErr)}
	case m.tmpl != nil:
		var err error
		if text, err = m.tmpl.Chat(msgs, opt); err != nil {
			return nil, badRequest("messages", "rendering the chat template: %v", err)
		}
	default:
		text = template.Fallback(fallbackTools(msgs, tools), opt)
	}
	tok := m.m.Tok
	// The template writes BOS itself when it wants one; add it only when
	// the vocabulary asks and the text does not already start with it.
	addSpecial := m.tmpl == nil || m.bos == "" || len(text) < len(m.bos) || text[:len(m.bos)] != m.bos
	ids, err := tok.Encode(text, addSpecial, true)
	if err != nil {
		return nil, badRequest("messages", "tokenizing the prompt: %v", err)
	}
	if len(ids) == 0 {
		return nil, badRequest("messages", "the prompt is empty")
	}
	if err := checkFit(m, len(ids)); err != nil {
		return nil, badRequest("messages", "%v", err)
	}
	return ids, nil
}

// sse writes server-sent events.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// data writes "data: {json}\n\n" (OpenAI framing).
func (e *sse) data(v any) error { return e.event("", v) }

// event writes "event: name\ndata: {json}\n\n" (Anthropic framing when
// name is set).
func (e *sse) event(name string, v any) error {
	if e.err != nil {
		return e.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return err
	}
	var buf []byte
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := e.w.Write(buf); err != nil {
		e.err = err
		return err
	}
	if err := e.rc.Flush(); err != nil {
		e.err = err
	}
	return e.err
}

func (e *sse) raw(s string) error {
	if e.err != nil {
		return e.err
	}
	if _, e.err = e.w.Write([]byte(s)); e.err == nil {
		e.err = e.rc.Flush()
	}
	return e.err
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	obj, e := readObject(r, chatFields)
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	var c common
	if e := s.parseCommon(obj, &c, "max_tokens", "max_completion_tokens"); e != nil {
		writeOpenAIError(w, e)
		return
	}
	if _, e := field(obj, "logprobs", &c.logprobs); e != nil {
		writeOpenAIError(w, e)
		return
	}
	if ok, e := field(obj, "top_logprobs", &c.topLogprobs); e != nil {
		writeOpenAIError(w, e)
		return
	} else if ok {
		if c.topLogprobs < 0 || c.topLogprobs > 20 {
			writeOpenAIError(w, badRequest("top_logprobs", "top_logprobs must be in [0, 20]"))
			return
		}
		if !c.logprobs {
			writeOpenAIError(w, badRequest("top_logprobs", "top_logprobs needs logprobs: true"))
			return
		}
	}
	raw, ok := obj["messages"]
	if !ok {
		writeOpenAIError(w, badRequest("messages", "the field \"messages\" is required"))
		return
	}
	msgs, e := chatMessages(raw)
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	if c.tools, e = parseOpenAITools(obj, c.m); e != nil {
		writeOpenAIError(w, e)
		return
	}
	ids, e := s.chatPrompt(c.m, msgs, c.tools.templateTools())
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	s.serveOpenAI(w, r, &c, ids, true, start)
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	obj, e := readObject(r, completionFields)
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	var c common
	c.maxTokens = 16 // OpenAI's default for completions
	if e := s.parseCommon(obj, &c, "max_tokens"); e != nil {
		writeOpenAIError(w, e)
		return
	}
	var echo bool
	if _, e := field(obj, "echo", &echo); e != nil {
		writeOpenAIError(w, e)
		return
	} else if echo {
		writeOpenAIError(w, unsupported("echo"))
		return
	}
	var bestOf int
	if ok, e := field(obj, "best_of", &bestOf); e != nil {
		writeOpenAIError(w, e)
		return
	} else if ok && bestOf != c.n {
		writeOpenAIError(w, unsupported("best_of"))
		return
	}
	var lp int
	if ok, e := field(obj, "logprobs", &lp); e != nil {
		writeOpenAIError(w, e)
		return
	} else if ok {
		if lp < 0 || lp > 20 {
			writeOpenAIError(w, badRequest("logprobs", "logprobs must be in [0, 20]"))
			return
		}
		c.logprobs, c.topLogprobs = true, lp
	}
	ids, e := s.completionPrompt(c.m, obj["prompt"])
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	s.serveOpenAI(w, r, &c, ids, false, start)
}

// completionPrompt accepts a string, an array of one string, or an array
// of token ids.
func (s *Server) completionPrompt(m *model, raw json.RawMessage) ([]int32, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "the field \"prompt\" is required")
	}
	var text string
	if json.Unmarshal(raw, &text) != nil {
		var list []string
		var ids []int32
		switch {
		case json.Unmarshal(raw, &list) == nil:
			if len(list) != 1 {
				return nil, badRequest("prompt", "unsupported: %d prompts in one request (send one string)", len(list))
			}
			text = list[0]
		case json.Unmarshal(raw, &ids) == nil:
			if len(ids) == 0 {
				return nil, badRequest("prompt", "the prompt is empty")
			}
			for _, id := range ids {
				if id < 0 || int(id) >= m.m.Tok.VocabSize() {
					return nil, badRequest("prompt", "token id %d is outside the vocabulary", id)
				}
			}
			if err := checkFit(m, len(ids)); err != nil {
				return nil, badRequest("prompt", "%v", err)
			}
			return ids, nil
		default:
			return nil, badRequest("prompt", "prompt must be a string, an array of one string, or an array of token ids")
		}
	}
	ids, err := m.m.Tok.Encode(text, true, false)
	if err != nil {
		return nil, badRequest("prompt", "tokenizing the prompt: %v", err)
	}
	if len(ids) == 0 {
		return nil, badRequest("prompt", "the prompt is empty (and the vocabulary adds no BOS)")
	}
	if err := checkFit(m, len(ids)); err != nil {
		return nil, badRequest("prompt", "%v", err)
	}
	return ids, nil
}

// serveOpenAI runs c.n generations of ids on one session and answers
// (chat or legacy completion shape, streamed or not).
func (s *Server) serveOpenAI(w http.ResponseWriter, r *http.Request, c *common, ids []int32, chat bool, start time.Time) {
	ctx := r.Context()
	if err := checkRoom(c.m, len(ids), c.maxTokens); err != nil {
		writeOpenAIError(w, asAPIError(err))
		return
	}
	sess, release, err := s.sessionFor(r, &c.m) // a pool slot, or the X-Jitllm-Session's
	if err != nil {
		if ctx.Err() != nil {
			return // the client went away while queued
		}
		writeOpenAIError(w, asAPIError(err))
		return
	}
	defer release()

	id, created := newID("cmpl-"), time.Now().Unix()
	object := "text_completion"
	if chat {
		id, object = newID("chatcmpl-"), "chat.completion"
	}
	spec := genSpec{tokens: ids, maxTokens: c.maxTokens, params: c.params, stops: c.stops, logprobs: c.logprobs, topLogprobs: c.topLogprobs, fork: newFork(c.n)}
	c.tools.apply(&spec)
	total := usage{}

	if !c.stream {
		choices := make([]any, 0, c.n)
		for i := 0; i < c.n; i++ {
			spec.params.Seed = c.params.Seed + uint64(i)
			out, err := s.generate(ctx, c.m, sess, spec, start, func(string, []tokenLP) error { return nil })
			if err != nil {
				if ctx.Err() == nil {
					writeOpenAIError(w, asAPIError(err))
				}
				return
			}
			total.PromptTokens = out.promptTokens
			total.CompletionTokens += out.completionTokens
			if chat {
				ch := map[string]any{"index": i, "message": map[string]any{"role": "assistant", "content": out.text, "refusal": nil}, "logprobs": nil, "finish_reason": out.finish}
				if c.logprobs {
					ch["logprobs"] = chatLogprobs(out.tokens, c.topLogprobs)
				}
				c.tools.message(ch, out)
				choices = append(choices, ch)
			} else {
				ch := map[string]any{"index": i, "text": out.text, "logprobs": nil, "finish_reason": out.finish}
				if c.logprobs {
					ch["logprobs"] = completionLogprobs(out.tokens)
				}
				choices = append(choices, ch)
			}
		}
		total.TotalTokens = total.PromptTokens + total.CompletionTokens
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": object, "created": created, "model": c.m.id,
			"system_fingerprint": nil, "choices": choices, "usage": total})
		return
	}

	ev := startSSE(w)
	object += ".chunk"
	if !chat {
		object = "text_completion"
	}
	chunk := func(choice map[string]any) error {
		v := map[string]any{"id": id, "object": object, "created": created, "model": c.m.id, "system_fingerprint": nil, "choices": []any{choice}}
		if c.includeUsage {
			v["usage"] = nil
		}
		return ev.data(v)
	}
	for i := 0; i < c.n; i++ {
		spec.params.Seed = c.params.Seed + uint64(i)
		if chat {
			if chunk(map[string]any{"index": i, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil, "finish_reason": nil}) != nil {
				return
			}
		}
		ts := c.tools.stream(i)
		out, err := s.generate(ctx, c.m, sess, spec, start, func(text string, toks []tokenLP) error {
			if ts != nil {
				return ts.feed(text, chunk)
			}
			ch := map[string]any{"index": i, "logprobs": nil, "finish_reason": nil}
			if chat {
				ch["delta"] = map[string]any{"content": text}
				if c.logprobs {
					ch["logprobs"] = chatLogprobs(toks, c.topLogprobs)
				}
			} else {
				ch["text"] = text
				if c.logprobs {
					ch["logprobs"] = completionLogprobs(toks)
				}
			}
			return chunk(ch)
		})
		if err != nil {
			if ctx.Err() == nil && ev.err == nil {
				ae := asAPIError(err)
				ev.data(map[string]any{"error": map[string]any{"message": ae.msg, "type": "server_error", "param": nil, "code": nil}})
			}
			return
		}
		total.PromptTokens = out.promptTokens
		total.CompletionTokens += out.completionTokens
		ch := map[string]any{"index": i, "logprobs": nil, "finish_reason": out.finish}
		if ts != nil {
			if ch["finish_reason"], err = ts.close(out.finish, chunk); err != nil {
				return
			}
		}
		if chat {
			ch["delta"] = map[string]any{}
		} else {
			ch["text"] = ""
		}
		if chunk(ch) != nil {
			return
		}
	}
	if c.includeUsage {
		total.TotalTokens = total.PromptTokens + total.CompletionTokens
		if ev.data(map[string]any{"id": id, "object": object, "created": created, "model": c.m.id, "system_fingerprint": nil, "choices": []any{}, "usage": total}) != nil {
			return
		}
	}
	ev.raw("data: [DONE]\n\n")
}

func byteInts(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func finiteLP(x float32) float64 {
	if math.IsInf(float64(x), -1) || x != x {
		return -9999
	}
	return float64(x)
}

func chatLogprobs(toks []tokenLP, top int) map[string]any {
	content := make([]any, 0, len(toks))
	for _, t := range toks {
		alts := make([]any, 0, len(t.top))
		for i, a := range t.top {
			if i >= top {
				break
			}
			alts = append(alts, map[string]any{"token": a.text, "logprob": finiteLP(a.lp), "bytes": byteInts(a.bytes)})
		}
		content = append(content, map[string]any{"token": t.text, "logprob": finiteLP(t.lp), "bytes": byteInts(t.bytes), "top_logprobs": alts})
	}
	return map[string]any{"content": content, "refusal": nil}
}

// completionLogprobs is the legacy shape: parallel arrays, text_offset
// in bytes into the completion text.
func completionLogprobs(toks []tokenLP) map[string]any {
	tokens := make([]string, len(toks))
	lps := make([]float64, len(toks))
	tops := make([]map[string]float64, len(toks))
	offs := make([]int, len(toks))
	for i, t := range toks {
		tokens[i], lps[i], offs[i] = t.text, finiteLP(t.lp), t.offset
		tops[i] = map[string]float64{}
		for _, a := range t.top {
			tops[i][a.text] = finiteLP(a.lp)
		}
	}
	return map[string]any{"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}
}
