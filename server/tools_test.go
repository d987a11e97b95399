package server

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jitllm/jitllm/runtime/template"
)

// The tool schema the tests force stories260K (a 260K-parameter story
// model that knows nothing of tools) to call.
const weatherSchema = `{"type":"object","properties":{"city":{"type":"string","minLength":1,"maxLength":12},"days":{"type":"integer"},"unit":{"enum":["c","f"]},"tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":2}},"required":["city","days","unit"],"additionalProperties":false}`

func validator(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(t *testing.T, v *jsonschema.Schema, text string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("not JSON: %q: %v", text, err)
	}
	if err := v.Validate(inst); err != nil {
		t.Fatalf("%q does not validate: %v", text, err)
	}
}

func weatherTools() []openai.ChatCompletionToolUnionParam {
	var params shared.FunctionParameters
	json.Unmarshal([]byte(weatherSchema), &params)
	return []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Description: openai.String("Weather of a city"), Parameters: params}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"tz": map[string]any{"enum": []any{"UTC", "CET"}}}, "required": []any{"tz"}}}),
	}
}

// tool_choice "required" and a named function make even stories260K
// produce a call whose arguments validate, streamed or not, through the
// official SDK.
func TestOpenAISDKToolChoice(t *testing.T) {
	_, hs := newTest(t, Config{})
	c := openaiClient(hs.URL)
	weather := validator(t, weatherSchema)
	for _, tc := range []struct {
		name   string
		choice openai.ChatCompletionToolChoiceOptionUnionParam
		want   string
	}{
		{"named", openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), "get_weather"},
		{"required", openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, temp := range []float64{0, 1} {
				params := openai.ChatCompletionNewParams{
					Model:       "stories",
					Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
					Tools:       weatherTools(),
					ToolChoice:  tc.choice,
					MaxTokens:   openai.Int(400),
					Temperature: openai.Float(temp),
					Seed:        openai.Int(7),
				}
				res, err := c.Chat.Completions.New(t.Context(), params)
				if err != nil {
					t.Fatal(err)
				}
				ch := res.Choices[0]
				if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
					t.Fatalf("temperature %v: choice %+v", temp, ch)
				}
				call := ch.Message.ToolCalls[0]
				if tc.want != "" && call.Function.Name != tc.want || !strings.HasPrefix(call.ID, "call_") || call.Type != "function" {
					t.Fatalf("call %+v", call)
				}
				t.Logf("temperature %v: %s(%s)", temp, call.Function.Name, call.Function.Arguments)
				switch call.Function.Name {
				case "get_weather":
					validate(t, weather, call.Function.Arguments)
				case "get_time":
					validate(t, validator(t, `{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}`), call.Function.Arguments)
				default:
					t.Fatalf("called %q", call.Function.Name)
				}

				// Streamed: the accumulator rebuilds the same call.
				st := c.Chat.Completions.NewStreaming(t.Context(), params)
				acc := openai.ChatCompletionAccumulator{}
				for st.Next() {
					acc.AddChunk(st.Current())
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				sc := acc.Choices[0]
				if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != 1 {
					t.Fatalf("streamed choice %+v", sc)
				}
				got := sc.Message.ToolCalls[0]
				if got.Function.Name != call.Function.Name || got.Function.Arguments != call.Function.Arguments {
					t.Errorf("streamed call %+v, non-streamed %+v", got.Function, call.Function)
				}
			}
		})
	}
}

// response_format json_schema: the content validates; json_object: it is
// an object.
func TestOpenAISDKStructuredOutput(t *testing.T) {
	_, hs := newTest(t, Config{})
	c := openaiClient(hs.URL)
	schema := `{"type":"object","properties":{"title":{"type":"string","maxLength":20},"ok":{"type":"boolean"},"n":{"anyOf":[{"type":"integer"},{"type":"null"}]},"words":{"type":"array","items":{"enum":["once","upon","time"]},"minItems":1,"maxItems":3}},"required":["title","ok","n","words"],"additionalProperties":false}`
	var sch map[string]any
	json.Unmarshal([]byte(schema), &sch)
	v := validator(t, schema)
	for _, temp := range []float64{0, 0.8} {
		params := openai.ChatCompletionNewParams{
			Model:       "stories",
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
			MaxTokens:   openai.Int(400),
			Temperature: openai.Float(temp),
			Seed:        openai.Int(3),
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "story", Schema: sch, Strict: openai.Bool(true)}}},
		}
		res, err := c.Chat.Completions.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].FinishReason != "stop" {
			t.Fatalf("finish %q: %q", res.Choices[0].FinishReason, res.Choices[0].Message.Content)
		}
		t.Logf("temperature %v: %s", temp, res.Choices[0].Message.Content)
		validate(t, v, res.Choices[0].Message.Content)

		st := c.Chat.Completions.NewStreaming(t.Context(), params)
		acc := openai.ChatCompletionAccumulator{}
		for st.Next() {
			acc.AddChunk(st.Current())
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content != res.Choices[0].Message.Content {
			t.Errorf("streamed %q, non-streamed %q", acc.Choices[0].Message.Content, res.Choices[0].Message.Content)
		}
	}
	params := openai.ChatCompletionNewParams{
		Model:          "stories",
		Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
		MaxTokens:      openai.Int(300),
		Temperature:    openai.Float(0),
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
	}
	res, err := c.Chat.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	text := res.Choices[0].Message.Content
	if res.Choices[0].FinishReason == "stop" && json.Unmarshal([]byte(text), &obj) != nil {
		t.Errorf("json_object: %q", text)
	}
	if !strings.HasPrefix(text, "{") {
		t.Errorf("json_object: %q", text)
	}
}

// The raw stream of a forced call: role first, then one delta with the
// call's index, id, type, name and empty arguments, then argument pieces
// only, a finish_reason "tool_calls" chunk and [DONE].
func TestToolCallSSEFraming(t *testing.T) {
	_, hs := newTest(t, Config{})
	body := `{"model":"stories","messages":[{"role":"user","content":"weather?"}],"max_tokens":300,"temperature":0,"stream":true,` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + weatherSchema + `}}],` +
		`"tool_choice":{"type":"function","function":{"name":"get_weather"}}}`
	resp, b := post(t, hs.URL+"/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	evs := parseSSE(t, b)
	if evs[len(evs)-1].data != "[DONE]" {
		t.Fatal("no [DONE]")
	}
	type delta struct {
		Role      *string `json:"role"`
		Content   *string `json:"content"`
		ToolCalls []struct {
			Index    *int    `json:"index"`
			ID       *string `json:"id"`
			Type     *string `json:"type"`
			Function struct {
				Name      *string `json:"name"`
				Arguments *string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	var chunks []struct {
		Choices []struct {
			Delta        delta   `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	for _, ev := range evs[:len(evs)-1] {
		var c struct {
			Choices []struct {
				Delta        delta   `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
	}
	if r := chunks[0].Choices[0].Delta.Role; r == nil || *r != "assistant" {
		t.Fatalf("first chunk %+v", chunks[0])
	}
	first := chunks[1].Choices[0].Delta.ToolCalls
	if len(first) != 1 || first[0].Index == nil || *first[0].Index != 0 || first[0].ID == nil || !strings.HasPrefix(*first[0].ID, "call_") ||
		first[0].Type == nil || *first[0].Type != "function" || first[0].Function.Name == nil || *first[0].Function.Name != "get_weather" ||
		first[0].Function.Arguments == nil || *first[0].Function.Arguments != "" {
		t.Fatalf("first tool chunk %+v", chunks[1])
	}
	var args strings.Builder
	pieces := 0
	for _, c := range chunks[2 : len(chunks)-1] {
		tc := c.Choices[0].Delta.ToolCalls
		if len(tc) != 1 || tc[0].ID != nil || tc[0].Function.Name != nil || tc[0].Index == nil || *tc[0].Index != 0 || c.Choices[0].Delta.Content != nil {
			t.Fatalf("argument chunk %+v", c)
		}
		args.WriteString(*tc[0].Function.Arguments)
		pieces++
	}
	if pieces < 2 {
		t.Errorf("arguments came in %d piece(s), not streamed", pieces)
	}
	validate(t, validator(t, weatherSchema), args.String())
	if f := chunks[len(chunks)-1].Choices[0].FinishReason; f == nil || *f != "tool_calls" {
		t.Errorf("last chunk %+v", chunks[len(chunks)-1])
	}
}

// A conversation with a call and its result goes back to the model.
func TestToolHistory(t *testing.T) {
	_, hs := newTest(t, Config{})
	body := `{"model":"stories","max_tokens":5,"temperature":0,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],` +
		`"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`
	resp, b := post(t, hs.URL+"/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	abody := `{"model":"stories","max_tokens":5,"temperature":0,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],` +
		`"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"text","text":"Let me see."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},{"type":"text","text":"thanks"}]}]}`
	resp, b = post(t, hs.URL+"/v1/messages", abody)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// Tools and tool turns reach a real chat template (Qwen2.5's), which
// renders them in its own syntax.
func TestToolsInTemplate(t *testing.T) {
	s, _ := newTest(t, Config{})
	m, _ := s.model("stories")
	src, err := os.ReadFile("../runtime/template/testdata/templates/models/Qwen-Qwen2.5-7B-Instruct.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tm, err := template.Compile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	m.tmpl = tm // this test's own server
	withTmpl := m
	msgs, e := chatMessages(json.RawMessage(`[{"role":"user","content":"weather?"},{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"}]`))
	if e != nil {
		t.Fatal(e)
	}
	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`)
	text, err := tm.Chat(msgs, template.ChatOptions{AddGenerationPrompt: true, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}`,
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"<tool_response>\nsunny\n</tool_response>",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, text)
		}
	}
	if _, e := s.chatPrompt(withTmpl, msgs, tools); e != nil {
		t.Fatal(e)
	}
	if f := modelFormat(withTmpl); f.Name != "hermes" {
		t.Errorf("format %s", f.Name)
	}
}

func TestAnthropicSDKToolUse(t *testing.T) {
	_, hs := newTest(t, Config{})
	c := anthropic.NewClient(aoption.WithBaseURL(hs.URL), aoption.WithAPIKey("test"), aoption.WithMaxRetries(0))
	var props map[string]any
	var sch struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	json.Unmarshal([]byte(weatherSchema), &sch)
	props = sch.Properties
	tool := anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("Weather of a city"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: props, Required: sch.Required, ExtraFields: map[string]any{"additionalProperties": false}}}
	v := validator(t, weatherSchema)
	for _, choice := range []anthropic.ToolChoiceUnionParam{
		anthropic.ToolChoiceParamOfTool("get_weather"),
		{OfAny: &anthropic.ToolChoiceAnyParam{}},
	} {
		params := anthropic.MessageNewParams{
			Model:      "stories",
			MaxTokens:  400,
			Messages:   []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is the weather in Paris?"))},
			Tools:      []anthropic.ToolUnionParam{{OfTool: &tool}},
			ToolChoice: choice,
		}
		greedy := aoption.WithJSONSet("temperature", 0)
		msg, err := c.Messages.New(t.Context(), params, greedy)
		if err != nil {
			t.Fatal(err)
		}
		if msg.StopReason != "tool_use" || len(msg.Content) == 0 {
			t.Fatalf("message %+v", msg)
		}
		use := msg.Content[len(msg.Content)-1]
		if use.Type != "tool_use" || use.Name != "get_weather" || !strings.HasPrefix(use.ID, "toolu_") {
			t.Fatalf("block %+v", use)
		}
		validate(t, v, string(use.Input))

		st := c.Messages.NewStreaming(t.Context(), params, greedy)
		acc := anthropic.Message{}
		for st.Next() {
			if err := acc.Accumulate(st.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		last := acc.Content[len(acc.Content)-1]
		if acc.StopReason != "tool_use" || last.Type != "tool_use" || last.Name != "get_weather" {
			t.Fatalf("streamed %+v", acc)
		}
		var a, b any
		json.Unmarshal(last.Input, &a)
		json.Unmarshal(use.Input, &b)
		if ja, _ := json.Marshal(a); string(ja) != func() string { jb, _ := json.Marshal(b); return string(jb) }() {
			t.Errorf("streamed input %s, non-streamed %s", last.Input, use.Input)
		}
	}
}

// The Anthropic stream of a call: a tool_use content_block_start and
// input_json_delta pieces.
func TestAnthropicToolSSE(t *testing.T) {
	_, hs := newTest(t, Config{})
	body := `{"model":"stories","max_tokens":300,"temperature":0,"stream":true,"messages":[{"role":"user","content":"weather?"}],` +
		`"tools":[{"name":"get_weather","input_schema":` + weatherSchema + `}],"tool_choice":{"type":"tool","name":"get_weather"}}`
	resp, b := post(t, hs.URL+"/v1/messages", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var names []string
	var partial strings.Builder
	for _, ev := range parseSSE(t, b) {
		if len(names) == 0 || names[len(names)-1] != ev.name {
			names = append(names, ev.name)
		}
		var v struct {
			Type         string `json:"type"`
			ContentBlock struct {
				Type string `json:"type"`
				Name string `json:"name"`
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
		}
		json.Unmarshal([]byte(ev.data), &v)
		switch ev.name {
		case "content_block_start":
			if v.ContentBlock.Type != "tool_use" || v.ContentBlock.Name != "get_weather" {
				t.Errorf("block start %s", ev.data)
			}
		case "content_block_delta":
			if v.Delta.Type != "input_json_delta" {
				t.Errorf("delta %s", ev.data)
			}
			partial.WriteString(v.Delta.PartialJSON)
		case "message_delta":
			if v.Delta.StopReason != "tool_use" {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Errorf("events %v, want %s", names, want)
	}
	validate(t, validator(t, weatherSchema), partial.String())
}

func TestToolErrors(t *testing.T) {
	_, hs := newTest(t, Config{})
	msgs := `"messages":[{"role":"user","content":"x"}]`
	fn := func(params string) string {
		return `"tools":[{"type":"function","function":{"name":"f","parameters":` + params + `}}]`
	}
	for _, c := range []struct{ body, param, substr string }{
		{`{"model":"stories",` + msgs + `,"tools":[{"type":"function","function":{"description":"d"}}]}`, "tools[0].function.name", `tools[0].function.name ""`},
		{`{"model":"stories",` + msgs + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type", `only "function" tools`},
		{`{"model":"stories",` + msgs + `,"tools":[{"type":"function","function":{"name":"f","color":1}}]}`, "tools[0].function.color", `unsupported field "tools[0].function.color"`},
		{`{"model":"stories",` + msgs + `,` + fn(`[]`) + `}`, "tools[0].function.parameters", "must be a JSON schema object"},
		{`{"model":"stories",` + msgs + `,` + fn(`{"type":"object","properties":{"a":{"type":"string","not":{}}}}`) + `,"tool_choice":"required"}`, "tools[0].function.parameters", `at /properties/a: unsupported JSON Schema keyword "not"`},
		{`{"model":"stories",` + msgs + `,` + fn(`{}`) + `,"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice", `"g", which is not in tools`},
		{`{"model":"stories",` + msgs + `,` + fn(`{}`) + `,"tool_choice":"sometimes"}`, "tool_choice", `not "sometimes"`},
		{`{"model":"stories",` + msgs + `,"tool_choice":"required"}`, "tool_choice", `needs tools`},
		{`{"model":"stories",` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","minProperties":1}}}}`, "response_format.json_schema.schema", `"minProperties"`},
		{`{"model":"stories",` + msgs + `,"response_format":{"type":"json_schema"}}`, "response_format.json_schema", "is required"},
		{`{"model":"stories",` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`, "response_format.json_schema.name", "name"},
		{`{"model":"stories","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id", "tool_call_id is required"},
		{`{"model":"stories","messages":[{"role":"user","content":"x","tool_calls":[]}]}`, "messages[0].tool_calls", "only assistant messages"},
		{`{"model":"stories","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.name", "is required"},
	} {
		resp, b := post(t, hs.URL+"/v1/chat/completions", c.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" ||
			e.Error.Param == nil || *e.Error.Param != c.param || !strings.Contains(e.Error.Message, c.substr) {
			t.Errorf("%s:\n %d %s", c.body, resp.StatusCode, b)
		}
	}
	amsgs := `"model":"stories","max_tokens":5,"messages":[{"role":"user","content":"x"}]`
	for _, c := range []struct{ body, substr string }{
		{`{` + amsgs + `,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"g"}}`, `no tool named "g"`},
		{`{` + amsgs + `,"tools":[{"name":"f","input_schema":{"type":"object","not":{}}}],"tool_choice":{"type":"any"}}`, `tools.0.input_schema: invalid or unsupported JSON schema: unsupported JSON Schema keyword "not"`},
		{`{` + amsgs + `,"tool_choice":{"type":"sometimes"}}`, `tool_choice.type`},
		{`{` + amsgs + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, `server tools`},
		{`{"model":"stories","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, `belong to assistant messages`},
		{`{"model":"stories","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"r"}]}]}`, `tool_use_id: field required`},
	} {
		resp, b := post(t, hs.URL+"/v1/messages", c.body)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 400 || e.Type != "error" || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, c.substr) {
			t.Errorf("%s:\n %d %s", c.body, resp.StatusCode, b)
		}
	}
}

// Auto mode on a model's own output (stories260K never writes a call, so
// the outputs are given): content and calls apart, finish_reason
// "tool_calls", parallel_tool_calls false keeping the first call, and the
// stream's deltas adding up to the same calls.
func TestAutoToolParse(t *testing.T) {
	text := "Let me look.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>"
	for _, parallel := range []bool{true, false} {
		ts := &toolSetup{format: modelFormat(&model{}), parse: true, parallel: parallel}
		ch := map[string]any{"message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}
		ts.message(ch, genOut{text: text, finish: "stop"})
		msg := ch["message"].(map[string]any)
		calls, _ := msg["tool_calls"].([]any)
		want := 2
		if !parallel {
			want = 1
		}
		if ch["finish_reason"] != "tool_calls" || msg["content"] != "Let me look." || len(calls) != want {
			t.Fatalf("parallel %v: %+v", parallel, ch)
		}
		first := calls[0].(map[string]any)["function"].(map[string]any)
		if first["name"] != "get_weather" || first["arguments"] != `{"city": "Paris"}` {
			t.Errorf("call %+v", first)
		}
		// Streamed in small pieces.
		st := ts.stream(0)
		var content strings.Builder
		args := map[int]string{}
		names := map[int]string{}
		collect := func(c map[string]any) error {
			d := c["delta"].(map[string]any)
			if s, ok := d["content"].(string); ok {
				content.WriteString(s)
			}
			if tcs, ok := d["tool_calls"].([]any); ok {
				tc := tcs[0].(map[string]any)
				i := tc["index"].(int)
				f := tc["function"].(map[string]any)
				if n, ok := f["name"].(string); ok {
					names[i] = n
				}
				args[i] += f["arguments"].(string)
			}
			return nil
		}
		for i := 0; i < len(text); i += 3 {
			if err := st.feed(text[i:min(i+3, len(text))], collect); err != nil {
				t.Fatal(err)
			}
		}
		finish, err := st.close("stop", collect)
		if err != nil || finish != "tool_calls" || content.String() != "Let me look." || len(names) != want || args[0] != `{"city": "Paris"}` {
			t.Errorf("parallel %v: stream %q %v %v %q", parallel, finish, names, args, content.String())
		}
	}
	// No call: the answer is left alone.
	ts := &toolSetup{format: modelFormat(&model{}), parse: true, parallel: true}
	ch := map[string]any{"message": map[string]any{"role": "assistant", "content": "Once upon a time"}, "finish_reason": "stop"}
	ts.message(ch, genOut{text: "Once upon a time", finish: "stop"})
	if ch["finish_reason"] != "stop" || ch["message"].(map[string]any)["tool_calls"] != nil {
		t.Errorf("%+v", ch)
	}
}
