package server

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/jitllm/jitllm/runtime/sample"
	"github.com/jitllm/jitllm/runtime/template"
)

var (
	messagesFields   = set("model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p", "top_k", "stream", "metadata", "tools", "tool_choice")
	anthMessageField = set("role", "content")
	anthPartExtra    = set("cache_control")
)

func writeAnthropicError(w http.ResponseWriter, e *apiError) {
	typ := "invalid_request_error"
	switch e.kind {
	case "not_found":
		typ = "not_found_error"
	case "rate_limit":
		typ = "rate_limit_error"
	case "overloaded":
		typ = "overloaded_error"
	case "server":
		typ = "api_error"
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": e.msg}})
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	obj, e := readObject(r, messagesFields)
	if e != nil {
		writeAnthropicError(w, e)
		return
	}
	fail := func(e *apiError) { writeAnthropicError(w, e) }
	var id string
	if _, e := field(obj, "model", &id); e != nil {
		fail(e)
		return
	}
	if id == "" {
		fail(badRequest("model", "model: field required"))
		return
	}
	m, ok := s.model(id)
	if !ok {
		e := notFound(id)
		e.msg = fmt.Sprintf("model: %s", id)
		fail(e)
		return
	}
	var maxTokens int
	if ok, e := field(obj, "max_tokens", &maxTokens); e != nil {
		fail(e)
		return
	} else if !ok {
		fail(badRequest("max_tokens", "max_tokens: field required"))
		return
	} else if maxTokens < 1 {
		fail(badRequest("max_tokens", "max_tokens: must be at least 1"))
		return
	}
	p := sample.DefaultParams()
	p.Temperature, p.TopK, p.TopP, p.MinP, p.RepeatLastN = 1, 0, 1, 0, 0
	p.Seed = mrand.Uint64()
	var f float64
	if ok, e := field(obj, "temperature", &f); e != nil {
		fail(e)
		return
	} else if ok {
		if !(f >= 0 && f <= 1) {
			fail(badRequest("temperature", "temperature: must be in [0, 1]"))
			return
		}
		p.Temperature = float32(f)
	}
	if ok, e := field(obj, "top_p", &f); e != nil {
		fail(e)
		return
	} else if ok {
		if !(f > 0 && f <= 1) {
			fail(badRequest("top_p", "top_p: must be in (0, 1]"))
			return
		}
		p.TopP = float32(f)
	}
	var k int
	if ok, e := field(obj, "top_k", &k); e != nil {
		fail(e)
		return
	} else if ok {
		if k < 0 {
			fail(badRequest("top_k", "top_k: must be >= 0"))
			return
		}
		p.TopK = k
	}
	var stops []string
	if _, e := field(obj, "stop_sequences", &stops); e != nil {
		fail(e)
		return
	}
	var stream bool
	if _, e := field(obj, "stream", &stream); e != nil {
		fail(e)
		return
	}
	if raw, ok := obj["metadata"]; ok {
		if _, e := parseObject(raw, "metadata", set("user_id")); e != nil {
			fail(e)
			return
		}
	}
	tools, e := parseAnthropicTools(obj, m)
	if e != nil {
		fail(e)
		return
	}
	var msgs []template.Message
	if raw, ok := obj["system"]; ok {
		sys, e := textContent(raw, "system", anthPartExtra)
		if e != nil {
			fail(e)
			return
		}
		if sys != "" {
			msgs = append(msgs, template.Message{Role: "system", Content: sys})
		}
	}
	var list []json.RawMessage
	if err := json.Unmarshal(obj["messages"], &list); err != nil || len(list) == 0 {
		fail(badRequest("messages", "messages: must be a non-empty array"))
		return
	}
	callNames := map[string]string{} // tool_use id -> name, for tool results
	for i, raw := range list {
		path := fmt.Sprintf("messages.%d", i)
		mo, e := parseObject(raw, path, anthMessageField)
		if e != nil {
			fail(e)
			return
		}
		var role string
		if _, e := field(mo, "role", &role); e != nil {
			fail(e)
			return
		}
		if role != "user" && role != "assistant" {
			fail(badRequest(path+".role", "%s.role: must be \"user\" or \"assistant\", not %q", path, role))
			return
		}
		mm, e := anthropicMessage(mo["content"], path, role, callNames)
		if e != nil {
			fail(e)
			return
		}
		msgs = append(msgs, mm...)
	}
	ids, e := s.chatPrompt(m, msgs, tools.templateTools())
	if e != nil {
		fail(e)
		return
	}

	ctx := r.Context()
	if err := checkRoom(m, len(ids), maxTokens); err != nil {
		fail(asAPIError(err))
		return
	}
	sess, release, err := s.sessionFor(r, &m) // a pool slot, or the X-Jitllm-Session's
	if err != nil {
		if ctx.Err() == nil {
			fail(asAPIError(err))
		}
		return
	}
	defer release()

	msgID := newID("msg_")
	spec := genSpec{tokens: ids, maxTokens: maxTokens, params: p, stops: stops}
	tools.apply(&spec)
	stopReason := func(out genOut) (string, any) {
		switch {
		case out.stopSeq != "":
			return "stop_sequence", out.stopSeq
		case out.finish == "length":
			return "max_tokens", nil
		}
		return "end_turn", nil
	}
	if !stream {
		out, err := s.generate(ctx, m, sess, spec, start, func(string, []tokenLP) error { return nil })
		if err != nil {
			if ctx.Err() == nil {
				fail(asAPIError(err))
			}
			return
		}
		reason, seq := stopReason(out)
		content, reason := tools.anthropicContent(out, reason)
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": m.id,
			"content":     content,
			"stop_reason": reason, "stop_sequence": seq,
			"usage": map[string]any{"input_tokens": out.promptTokens, "output_tokens": out.completionTokens},
		})
		return
	}
	ev := startSSE(w)
	ev.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": m.id, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": len(ids), "output_tokens": 0},
	}})
	if tools.parsing() {
		s.streamAnthropicTools(ctx, ev, m, sess, spec, start, tools, stopReason)
		return
	}
	ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	ev.event("ping", map[string]any{"type": "ping"})
	if ev.err != nil {
		return
	}
	out, err := s.generate(ctx, m, sess, spec, start, func(text string, _ []tokenLP) error {
		if text == "" {
			return nil
		}
		return ev.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text}})
	})
	if err != nil {
		if ctx.Err() == nil && ev.err == nil {
			ae := asAPIError(err)
			ev.event("error", map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": ae.msg}})
		}
		return
	}
	reason, seq := stopReason(out)
	ev.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	ev.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": map[string]any{"output_tokens": out.completionTokens}})
	ev.event("message_stop", map[string]any{"type": "message_stop"})
}
