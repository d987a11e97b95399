package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/template"
	"github.com/jitllm/jitllm/runtime/toolcall"
)

// parseAnthropicTools reads tools and tool_choice of a Messages request.
func parseAnthropicTools(obj map[string]json.RawMessage, m *model) (*toolSetup, *apiError) {
	raw, ok := obj["tools"]
	hasTools := ok && string(raw) != "null"
	t := &toolSetup{format: modelFormat(m), parallel: true}
	if hasTools {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, badRequest("tools", "tools: must be an array of tools")
		}
		if len(list) > 128 {
			return nil, badRequest("tools", "tools: at most 128 tools")
		}
		var tmpl bytes.Buffer
		tmpl.WriteByte('[')
		seen := map[string]bool{}
		for i, rt := range list {
			path := fmt.Sprintf("tools.%d", i)
			to, e := parseObject(rt, path, set("name", "description", "input_schema", "type", "cache_control"))
			if e != nil {
				return nil, e
			}
			var name, desc, typ string
			if _, e := field(to, "type", &typ); e != nil {
				return nil, e
			}
			if typ != "" && typ != "custom" {
				return nil, badRequest(path+".type", "%s.type: server tools (%q) are not supported; define a custom tool with input_schema", path, typ)
			}
			if _, e := field(to, "name", &name); e != nil {
				return nil, e
			}
			if !toolName.MatchString(name) {
				return nil, badRequest(path+".name", "%s.name: %q must be 1 to 64 letters, digits, _ . or -", path, name)
			}
			if seen[name] {
				return nil, badRequest(path+".name", "%s.name: %q is listed twice", path, name)
			}
			seen[name] = true
			if _, e := field(to, "description", &desc); e != nil {
				return nil, e
			}
			schema, ok := to["input_schema"]
			if !ok {
				return nil, badRequest(path+".input_schema", "%s.input_schema: field required", path)
			}
			params, e := checkParams(schema, path+".input_schema")
			if e != nil {
				return nil, e
			}
			t.tools = append(t.tools, toolcall.Tool{Name: name, Parameters: params})
			// The templates read OpenAI's shape.
			nj, _ := json.Marshal(name)
			dj, _ := json.Marshal(desc)
			if i > 0 {
				tmpl.WriteByte(',')
			}
			fmt.Fprintf(&tmpl, `{"type":"function","function":{"name":%s,"description":%s,"parameters":%s}}`, nj, dj, params)
		}
		tmpl.WriteByte(']')
		if len(list) > 0 {
			t.tmplTools = tmpl.Bytes()
		}
	}
	choice, name := "auto", ""
	if raw, ok := obj["tool_choice"]; ok && string(raw) != "null" {
		co, e := parseObject(raw, "tool_choice", set("type", "name", "disable_parallel_tool_use"))
		if e != nil {
			return nil, e
		}
		if _, e := field(co, "type", &choice); e != nil {
			return nil, e
		}
		if _, e := field(co, "name", &name); e != nil {
			return nil, e
		}
		var noParallel bool
		if _, e := field(co, "disable_parallel_tool_use", &noParallel); e != nil {
			return nil, e
		}
		t.parallel = !noParallel
	}
	var forced []toolcall.Tool
	param := "tools"
	switch choice {
	case "none":
	case "auto":
		t.parse = len(t.tools) > 0
	case "any":
		if len(t.tools) == 0 {
			return nil, badRequest("tool_choice", "tool_choice: type \"any\" needs tools")
		}
		t.parse, forced = true, t.tools
		for i, tl := range t.tools {
			if _, e := compileParams(tl, fmt.Sprintf("tools.%d.input_schema", i)); e != nil {
				return nil, e
			}
		}
	case "tool":
		for i, tl := range t.tools {
			if tl.Name == name {
				forced, param = []toolcall.Tool{tl}, fmt.Sprintf("tools.%d.input_schema", i)
			}
		}
		if forced == nil {
			return nil, badRequest("tool_choice.name", "tool_choice.name: no tool named %q in tools", name)
		}
		t.parse = true
	default:
		return nil, badRequest("tool_choice.type", "tool_choice.type: must be \"auto\", \"any\", \"tool\" or \"none\", not %q", choice)
	}
	if e := t.finishSetup(m, forced, param); e != nil {
		return nil, e
	}
	if !t.parse && t.tmplTools == nil {
		return nil, nil
	}
	return t, nil
}

// compileParams checks that a forced tool's schema compiles.
func compileParams(tl toolcall.Tool, param string) (struct{}, *apiError) {
	if tl.Parameters == nil {
		return struct{}{}, nil
	}
	if _, err := toolcall.Hermes.Grammar([]toolcall.Tool{tl}, nil); err != nil {
		return struct{}{}, schemaError(param, err)
	}
	return struct{}{}, nil
}

// anthropicID is the Anthropic form of a call id, and back.
func anthropicID(id string) string { return "toolu_" + strings.TrimPrefix(id, "call_") }
func templateID(id string) string  { return strings.TrimPrefix(id, "toolu_") }

// anthropicMessage reads one message's content blocks (text, tool_use in
// assistant turns, tool_result in user turns) into template messages: the
// tool results become tool messages before the user's text.
func anthropicMessage(raw json.RawMessage, path, role string, names map[string]string) ([]template.Message, *apiError) {
	var s string
	if len(raw) == 0 || string(raw) == "null" || json.Unmarshal(raw, &s) == nil {
		return []template.Message{{Role: role, Content: s}}, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badRequest(path+".content", "%s.content: expected a string or an array of content blocks", path)
	}
	var out []template.Message
	var text strings.Builder
	var calls bytes.Buffer
	ncalls := 0
	for i, b := range blocks {
		bp := fmt.Sprintf("%s.content.%d", path, i)
		var head struct {
			Type string `json:"type"`
		}
		json.Unmarshal(b, &head)
		switch head.Type {
		case "tool_use":
			if role != "assistant" {
				return nil, badRequest(bp+".type", "%s: tool_use blocks belong to assistant messages", bp)
			}
			bo, e := parseObject(b, bp, set("type", "id", "name", "input", "cache_control"))
			if e != nil {
				return nil, e
			}
			var id, name string
			if _, e := field(bo, "id", &id); e != nil {
				return nil, e
			}
			if _, e := field(bo, "name", &name); e != nil {
				return nil, e
			}
			input := bo["input"]
			var probe map[string]json.RawMessage
			if json.Unmarshal(input, &probe) != nil {
				return nil, badRequest(bp+".input", "%s.input: must be an object", bp)
			}
			if ncalls > 0 {
				calls.WriteByte(',')
			}
			ncalls++
			writeCall(&calls, templateID(id), name, string(input))
			if len(names) < 4096 {
				names[id] = name
			}
		case "tool_result":
			if role != "user" {
				return nil, badRequest(bp+".type", "%s: tool_result blocks belong to user messages", bp)
			}
			bo, e := parseObject(b, bp, set("type", "tool_use_id", "content", "is_error", "cache_control"))
			if e != nil {
				return nil, e
			}
			var id string
			var isErr bool
			if _, e := field(bo, "tool_use_id", &id); e != nil {
				return nil, e
			}
			if id == "" {
				return nil, badRequest(bp+".tool_use_id", "%s.tool_use_id: field required", bp)
			}
			if _, e := field(bo, "is_error", &isErr); e != nil {
				return nil, e
			}
			res, e := textContent(bo["content"], bp+".content", anthPartExtra)
			if e != nil {
				return nil, e
			}
			if isErr {
				res = "Error: " + res
			}
			out = append(out, template.Message{Role: "tool", Content: res, Fields: toolFields(templateID(id), names[id])})
		default:
			t, e := textContent(json.RawMessage("["+string(b)+"]"), bp, anthPartExtra)
			if e != nil {
				e.msg = strings.ReplaceAll(e.msg, bp+"[0]", bp)
				e.param = strings.ReplaceAll(e.param, bp+"[0]", bp)
				return nil, e
			}
			text.WriteString(t)
		}
	}
	if text.Len() > 0 || ncalls > 0 || len(out) == 0 {
		msg := template.Message{Role: role, Content: text.String()}
		if ncalls > 0 {
			msg.Fields = []byte(`{"tool_calls":[` + calls.String() + `]}`)
		}
		out = append(out, msg)
	}
	return out, nil
}

// anthropicContent is a finished generation's content blocks and its
// stop_reason ("tool_use" when it called a tool).
func (t *toolSetup) anthropicContent(out genOut, reason string) ([]any, string) {
	if !t.parsing() {
		return []any{map[string]any{"type": "text", "text": out.text}}, reason
	}
	content, calls := t.parseAll(out.text)
	var blocks []any
	if strings.TrimSpace(content) != "" || len(calls) == 0 {
		blocks = append(blocks, map[string]any{"type": "text", "text": content})
	}
	for _, c := range calls {
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": anthropicID(c.ID), "name": c.Name, "input": inputObject(c.Arguments)})
	}
	if len(calls) > 0 && reason != "max_tokens" {
		reason = "tool_use"
	}
	return blocks, reason
}

// inputObject is a call's arguments as Anthropic's input object ({} when
// they were cut short).
func inputObject(args string) json.RawMessage {
	var probe map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &probe) != nil {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

// streamAnthropicTools streams a generation whose tool calls are parsed:
// a text block opens when text comes, a tool_use block per call (its input
// in input_json_delta pieces), each closed before the next opens.
func (s *Server) streamAnthropicTools(ctx context.Context, ev *sse, m *model, sess *generate.Session, spec genSpec, start time.Time, t *toolSetup, stopReason func(genOut) (string, any)) {
	p := t.format.NewParser(t.tools)
	block, open, kind := -1, false, ""
	calls := 0
	closeBlock := func() error {
		if !open {
			return nil
		}
		open = false
		return ev.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": block})
	}
	send := func(evs []toolcall.Event) error {
		for _, e := range evs {
			if !t.parallel && e.Index > 0 && e.Kind != toolcall.Text {
				continue
			}
			switch e.Kind {
			case toolcall.Text:
				if !open || kind != "text" {
					if err := closeBlock(); err != nil {
						return err
					}
					block, open, kind = block+1, true, "text"
					if err := ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": block, "content_block": map[string]any{"type": "text", "text": ""}}); err != nil {
						return err
					}
				}
				if err := ev.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": block, "delta": map[string]any{"type": "text_delta", "text": e.Text}}); err != nil {
					return err
				}
			case toolcall.Start:
				if err := closeBlock(); err != nil {
					return err
				}
				calls++
				block, open, kind = block+1, true, "tool_use"
				if err := ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": block,
					"content_block": map[string]any{"type": "tool_use", "id": anthropicID(e.ID), "name": e.Name, "input": map[string]any{}}}); err != nil {
					return err
				}
			case toolcall.Args:
				if err := ev.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": block, "delta": map[string]any{"type": "input_json_delta", "partial_json": e.Text}}); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if ev.event("ping", map[string]any{"type": "ping"}) != nil {
		return
	}
	out, err := s.generate(ctx, m, sess, spec, start, func(text string, _ []tokenLP) error { return send(p.Feed(text)) })
	if err == nil {
		err = send(p.Close())
	}
	if err != nil {
		if ctx.Err() == nil && ev.err == nil {
			ae := asAPIError(err)
			ev.event("error", map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": ae.msg}})
		}
		return
	}
	if block < 0 { // no content at all: an empty text block, as a text-only answer has
		block, open = 0, true
		ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	}
	closeBlock()
	reason, seq := stopReason(out)
	if calls > 0 && reason != "max_tokens" {
		reason = "tool_use"
	}
	ev.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": map[string]any{"output_tokens": out.completionTokens}})
	ev.event("message_stop", map[string]any{"type": "message_stop"})
}
