package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/runtime/grammar"
	"github.com/jitllm/jitllm/runtime/template"
	"github.com/jitllm/jitllm/runtime/toolcall"
)

// toolSetup is what a request's tools, tool_choice and response_format
// ask of its generation: a grammar to constrain it, and whether (and in
// which family's syntax) to read tool calls out of its text.
type toolSetup struct {
	format    *toolcall.Format
	tools     []toolcall.Tool
	parse     bool // read tool calls out of the output
	parallel  bool // more than one call may be returned
	grammar   *grammar.Grammar
	vocab     *grammar.Vocab
	markers   map[int32]string
	tmplTools json.RawMessage // the chat template's tools variable (OpenAI's shape)
}

// modelVocab is the model's masking trie, built on first need.
func modelVocab(m *model) *grammar.Vocab {
	m.vocabOnce.Do(func() { m.vocab = grammar.NewVocab(m.m.Tok) })
	return m.vocab
}

// modelFormat is the tool-call syntax the model's template shows (Hermes
// when it shows none, and for the plain fallback format).
func modelFormat(m *model) *toolcall.Format {
	if m.tmpl == nil {
		return toolcall.Hermes
	}
	f, _ := toolcall.Detect(m.tmpl.Source())
	return f
}

// templateTools is nil-safe: the tools variable, or nil.
func (t *toolSetup) templateTools() json.RawMessage {
	if t == nil {
		return nil
	}
	return t.tmplTools
}

func (t *toolSetup) parsing() bool { return t != nil && t.parse }

// apply puts the setup into a generation.
func (t *toolSetup) apply(spec *genSpec) {
	if t == nil {
		return
	}
	if g := t.grammar; g != nil {
		v := t.vocab
		spec.constraint = func() generate.Constraint { return grammar.NewConstraint(g, v) }
	}
	if t.parse {
		spec.markers = t.markers
	}
}

// finishSetup resolves the grammar of forced calls and the markers.
func (t *toolSetup) finishSetup(m *model, forced []toolcall.Tool, param string) *apiError {
	if t.parse {
		t.vocab = modelVocab(m)
		t.markers = map[int32]string{}
		for _, s := range t.format.Markers() {
			if id, ok := t.vocab.SpecialID(s); ok {
				t.markers[id] = s
			}
		}
	}
	if forced != nil {
		g, err := t.format.Grammar(forced, t.vocab)
		if err != nil {
			return schemaError(param, err)
		}
		t.grammar = g
	}
	return nil
}

func schemaError(param string, err error) *apiError {
	var se *grammar.SchemaError
	if errors.As(err, &se) && se.Path != "" {
		return badRequest(param, "%s: invalid or unsupported JSON schema at %s: %s", param, se.Path, se.Msg)
	}
	return badRequest(param, "%s: invalid or unsupported JSON schema: %v", param, err)
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// checkParams checks a parameters schema is a JSON object (compiled only
// when a call is forced, so that auto tools may use any keyword).
func checkParams(raw json.RawMessage, param string) (json.RawMessage, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, badRequest(param, "%s must be a JSON schema object", param)
	}
	return raw, nil
}

// parseOpenAITools reads tools, tool_choice, parallel_tool_calls and
// response_format of a chat request; nil when none asks for anything.
func parseOpenAITools(obj map[string]json.RawMessage, m *model) (*toolSetup, *apiError) {
	t := &toolSetup{format: modelFormat(m), parallel: true}
	var forced []toolcall.Tool
	forcedParam := ""
	if raw, ok := obj["tools"]; ok && string(raw) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, badRequest("tools", "tools must be an array of tools")
		}
		if len(list) == 0 {
			return nil, badRequest("tools", "tools: empty array; expected at least 1 tool (or leave tools out)")
		}
		if len(list) > 128 {
			return nil, badRequest("tools", "tools: at most 128 tools")
		}
		seen := map[string]bool{}
		for i, rt := range list {
			path := fmt.Sprintf("tools[%d]", i)
			to, e := parseObject(rt, path, set("type", "function"))
			if e != nil {
				return nil, e
			}
			var typ string
			if _, e := field(to, "type", &typ); e != nil {
				return nil, e
			}
			if typ != "function" {
				return nil, badRequest(path+".type", "%s.type: only \"function\" tools are supported, not %q", path, typ)
			}
			fo, e := parseObject(to["function"], path+".function", set("name", "description", "parameters", "strict"))
			if e != nil {
				return nil, e
			}
			var name, desc string
			var strict bool
			if _, e := field(fo, "name", &name); e != nil {
				return nil, e
			}
			if !toolName.MatchString(name) {
				return nil, badRequest(path+".function.name", "%s.function.name %q: 1 to 64 letters, digits, _ . or -", path, name)
			}
			if seen[name] {
				return nil, badRequest(path+".function.name", "%s.function.name: %q is listed twice", path, name)
			}
			seen[name] = true
			if _, e := field(fo, "description", &desc); e != nil {
				return nil, e
			}
			if _, e := field(fo, "strict", &strict); e != nil {
				return nil, e
			}
			params, e := checkParams(fo["parameters"], path+".function.parameters")
			if e != nil {
				return nil, e
			}
			t.tools = append(t.tools, toolcall.Tool{Name: name, Parameters: params})
		}
		t.tmplTools = raw
	}
	choice := "auto"
	if raw, ok := obj["tool_choice"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &choice) != nil {
			co, e := parseObject(raw, "tool_choice", set("type", "function"))
			if e != nil {
				return nil, badRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type":"function","function":{"name":...}}`)
			}
			var typ string
			if _, e := field(co, "type", &typ); e != nil {
				return nil, e
			}
			fo, e := parseObject(co["function"], "tool_choice.function", set("name"))
			if typ != "function" || e != nil {
				return nil, badRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type":"function","function":{"name":...}}`)
			}
			var name string
			if _, e := field(fo, "name", &name); e != nil {
				return nil, e
			}
			choice = "function:" + name
		}
	}
	switch {
	case choice == "none":
	case choice == "auto":
		t.parse = len(t.tools) > 0
	case choice == "required":
		if len(t.tools) == 0 {
			return nil, badRequest("tool_choice", `tool_choice "required" needs tools`)
		}
		t.parse, forced, forcedParam = true, t.tools, "tools"
	case strings.HasPrefix(choice, "function:"):
		name := strings.TrimPrefix(choice, "function:")
		for i, tl := range t.tools {
			if tl.Name == name {
				forced, forcedParam = []toolcall.Tool{tl}, fmt.Sprintf("tools[%d].function.parameters", i)
			}
		}
		if forced == nil {
			return nil, badRequest("tool_choice", "tool_choice names the function %q, which is not in tools", name)
		}
		t.parse = true
	default:
		return nil, badRequest("tool_choice", `tool_choice must be "none", "auto", "required" or {"type":"function","function":{"name":...}}, not %q`, choice)
	}
	if ok, e := field(obj, "parallel_tool_calls", &t.parallel); e != nil {
		return nil, e
	} else if ok && len(t.tools) == 0 {
		return nil, badRequest("parallel_tool_calls", "parallel_tool_calls needs tools")
	}
	if forced != nil && forcedParam == "tools" && len(forced) > 1 {
		// Name the tool whose schema fails, not just the list.
		for i, tl := range forced {
			if tl.Parameters != nil {
				if _, err := grammar.CompileSchema(tl.Parameters); err != nil {
					return nil, schemaError(fmt.Sprintf("tools[%d].function.parameters", i), err)
				}
			}
		}
	} else if forced != nil && forcedParam == "tools" {
		forcedParam = "tools[0].function.parameters"
	}
	if e := t.finishSetup(m, forced, forcedParam); e != nil {
		return nil, e
	}
	if forced == nil {
		g, e := responseFormat(obj)
		if e != nil {
			return nil, e
		}
		if g != nil {
			t.grammar, t.vocab = g, modelVocab(m)
		}
	} else if _, e := responseFormat(obj); e != nil {
		return nil, e
	}
	if !t.parse && t.grammar == nil && t.tmplTools == nil {
		return nil, nil
	}
	return t, nil
}

// responseFormat compiles response_format into a grammar (nil for text).
func responseFormat(obj map[string]json.RawMessage) (*grammar.Grammar, *apiError) {
	raw, ok := obj["response_format"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	ro, e := parseObject(raw, "response_format", set("type", "json_schema"))
	if e != nil {
		return nil, e
	}
	var typ string
	if _, e := field(ro, "type", &typ); e != nil {
		return nil, e
	}
	switch typ {
	case "text":
		return nil, nil
	case "json_object":
		return grammar.JSONObject(), nil
	case "json_schema":
		js, ok := ro["json_schema"]
		if !ok {
			return nil, badRequest("response_format.json_schema", "response_format.json_schema is required with type \"json_schema\"")
		}
		jo, e := parseObject(js, "response_format.json_schema", set("name", "description", "schema", "strict"))
		if e != nil {
			return nil, e
		}
		var name, desc string
		var strict bool
		if _, e := field(jo, "name", &name); e != nil {
			return nil, e
		}
		if !toolName.MatchString(name) {
			return nil, badRequest("response_format.json_schema.name", "response_format.json_schema.name %q: 1 to 64 letters, digits, _ . or -", name)
		}
		if _, e := field(jo, "description", &desc); e != nil {
			return nil, e
		}
		if _, e := field(jo, "strict", &strict); e != nil {
			return nil, e
		}
		schema := jo["schema"]
		if len(schema) == 0 || string(schema) == "null" {
			return grammar.JSONObject(), nil
		}
		g, err := grammar.CompileSchema(schema)
		if err != nil {
			return nil, schemaError("response_format.json_schema.schema", err)
		}
		return g, nil
	}
	return nil, badRequest("response_format.type", `response_format.type must be "text", "json_object" or "json_schema", not %q`, typ)
}

// assistantToolCalls reads an assistant message's tool_calls into the
// template's form (arguments parsed to objects, as templates expect),
// recording each call's function name by id in names.
func assistantToolCalls(raw json.RawMessage, path string, names map[string]string) (json.RawMessage, *apiError) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(path, "%s must be an array of tool calls", path)
	}
	var b bytes.Buffer
	b.WriteString(`{"tool_calls":[`)
	for i, rc := range list {
		p := fmt.Sprintf("%s[%d]", path, i)
		co, e := parseObject(rc, p, set("id", "type", "function"))
		if e != nil {
			return nil, e
		}
		var id, typ string
		if _, e := field(co, "id", &id); e != nil {
			return nil, e
		}
		if _, e := field(co, "type", &typ); e != nil {
			return nil, e
		}
		if typ != "" && typ != "function" {
			return nil, badRequest(p+".type", "%s.type: only \"function\", not %q", p, typ)
		}
		fo, e := parseObject(co["function"], p+".function", set("name", "arguments"))
		if e != nil {
			return nil, e
		}
		var name, args string
		if _, e := field(fo, "name", &name); e != nil {
			return nil, e
		}
		if name == "" {
			return nil, badRequest(p+".function.name", "%s.function.name is required", p)
		}
		if _, e := field(fo, "arguments", &args); e != nil {
			return nil, e
		}
		if i > 0 {
			b.WriteByte(',')
		}
		writeCall(&b, id, name, args)
		if len(names) < 4096 {
			names[id] = name
		}
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// writeCall writes one call in the template's form.
func writeCall(b *bytes.Buffer, id, name, args string) {
	idj, _ := json.Marshal(id)
	nj, _ := json.Marshal(name)
	var aj []byte
	if strings.TrimSpace(args) == "" {
		aj = []byte("{}")
	} else if json.Valid([]byte(args)) {
		aj = []byte(args)
	} else {
		aj, _ = json.Marshal(args) // not JSON: the template gets the string
	}
	fmt.Fprintf(b, `{"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}`, idj, nj, aj)
}

// toolFields is the template fields of a tool message.
func toolFields(id, name string) []byte {
	idj, _ := json.Marshal(id)
	if name == "" {
		return []byte(`{"tool_call_id":` + string(idj) + `}`)
	}
	nj, _ := json.Marshal(name)
	return []byte(`{"tool_call_id":` + string(idj) + `,"name":` + string(nj) + `}`)
}

// fallbackTools turns tool calls, tool results and the tool list into
// plain lines for models without a chat template, in the Hermes syntax
// their calls are read back in.
func fallbackTools(msgs []template.Message, tools json.RawMessage) []template.Message {
	out := make([]template.Message, 0, len(msgs)+1)
	if len(tools) > 0 {
		var b bytes.Buffer
		json.Compact(&b, tools)
		out = append(out, template.Message{Role: "system", Content: `You may call these tools, each as <tool_call>{"name": ..., "arguments": ...}</tool_call>: ` + b.String()})
	}
	for _, m := range msgs {
		if len(m.Fields) > 0 && m.Role == "assistant" {
			var f struct {
				ToolCalls []struct {
					Function struct {
						Name      string          `json:"name"`
						Arguments json.RawMessage `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			}
			json.Unmarshal(m.Fields, &f)
			var b strings.Builder
			b.WriteString(m.Content)
			for _, c := range f.ToolCalls {
				nj, _ := json.Marshal(c.Function.Name)
				fmt.Fprintf(&b, "<tool_call>{\"name\": %s, \"arguments\": %s}</tool_call>", nj, c.Function.Arguments)
			}
			m = template.Message{Role: m.Role, Content: b.String()}
		}
		m.Fields = nil
		out = append(out, m)
	}
	return out
}

// parseAll runs the parser over a finished generation's text.
func (t *toolSetup) parseAll(text string) (string, []toolcall.Call) {
	p := t.format.NewParser(t.tools)
	p.Feed(text)
	p.Close()
	calls := p.Calls()
	if !t.parallel && len(calls) > 1 {
		calls = calls[:1]
	}
	return p.Content(), calls
}

// message rewrites a chat choice for tool calls: message.tool_calls and
// finish_reason "tool_calls".
func (t *toolSetup) message(ch map[string]any, out genOut) {
	if !t.parsing() {
		return
	}
	content, calls := t.parseAll(out.text)
	if len(calls) == 0 {
		return
	}
	msg := ch["message"].(map[string]any)
	msg["content"] = nil
	if strings.TrimSpace(content) != "" {
		msg["content"] = content
	}
	list := make([]any, len(calls))
	for i, c := range calls {
		list[i] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
	}
	msg["tool_calls"] = list
	if out.finish != "length" {
		ch["finish_reason"] = "tool_calls"
	}
}

// toolStream turns one streamed choice's text into content and
// tool_calls deltas, as OpenAI streams them: the first delta of a call
// carries its index, id, type and name (arguments ""), the next ones
// pieces of its arguments.
type toolStream struct {
	t      *toolSetup
	p      *toolcall.Parser
	choice int
	calls  int
}

func (t *toolSetup) stream(choice int) *toolStream {
	if !t.parsing() {
		return nil
	}
	return &toolStream{t: t, p: t.format.NewParser(t.tools), choice: choice}
}

func (ts *toolStream) send(evs []toolcall.Event, chunk func(map[string]any) error) error {
	for _, e := range evs {
		if !ts.t.parallel && e.Index > 0 && e.Kind != toolcall.Text {
			continue
		}
		var delta map[string]any
		switch e.Kind {
		case toolcall.Text:
			delta = map[string]any{"content": e.Text}
		case toolcall.Start:
			ts.calls++
			delta = map[string]any{"tool_calls": []any{map[string]any{"index": e.Index, "id": e.ID, "type": "function",
				"function": map[string]any{"name": e.Name, "arguments": ""}}}}
		case toolcall.Args:
			delta = map[string]any{"tool_calls": []any{map[string]any{"index": e.Index, "function": map[string]any{"arguments": e.Text}}}}
		}
		if err := chunk(map[string]any{"index": ts.choice, "delta": delta, "logprobs": nil, "finish_reason": nil}); err != nil {
			return err
		}
	}
	return nil
}

func (ts *toolStream) feed(text string, chunk func(map[string]any) error) error {
	return ts.send(ts.p.Feed(text), chunk)
}

// close flushes the parse and returns the choice's finish_reason.
func (ts *toolStream) close(finish string, chunk func(map[string]any) error) (string, error) {
	if err := ts.send(ts.p.Close(), chunk); err != nil {
		return finish, err
	}
	if ts.calls > 0 && finish != "length" {
		return "tool_calls", nil
	}
	return finish, nil
}
