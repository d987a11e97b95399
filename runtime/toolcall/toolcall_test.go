package toolcall_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/jitllm/jitllm/runtime/template"
	"github.com/jitllm/jitllm/runtime/toolcall"
)

var weatherTool = toolcall.Tool{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}`)}

// testTools are the tools the parses know (a bare Llama 3 object must
// name one of them).
var testTools = []toolcall.Tool{weatherTool, {Name: "get_time"}, {Name: "f"}, {Name: "g"}}

// readTemplate reads a model's chat template: this package's own copy
// (testdata/templates) or the template package's.
func readTemplate(name string) ([]byte, error) {
	if b, err := os.ReadFile("testdata/templates/" + name + ".jinja"); err == nil {
		return b, nil
	}
	return os.ReadFile("../template/testdata/templates/models/" + name + ".jinja")
}

// stringArgs are the templates that take a call's arguments as JSON text.
var stringArgs = map[string]bool{"meetkai-functionary-medium-v3.2": true}

// render renders a conversation whose assistant turn is a call of
// get_weather with the model's own template, and returns the template's
// text of that turn (what the model would have generated).
func render(t *testing.T, name, from, to string, ncalls int) string {
	t.Helper()
	src, err := readTemplate(name)
	if err != nil {
		t.Fatalf("no template %s: %v", name, err)
	}
	tm, err := template.Compile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	var a1, a2 any = map[string]any{"city": "Paris", "days": 3}, map[string]any{"city": "Nice"}
	if stringArgs[name] { // the template concatenates arguments: OpenAI's JSON text
		a1, a2 = `{"city": "Paris", "days": 3}`, `{"city": "Nice"}`
	}
	vars := map[string]any{
		"messages": []any{
			map[string]any{"role": "user", "content": "Weather in Paris?"},
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{
				map[string]any{"id": "abcDEF123", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": a1}},
				map[string]any{"id": "xyzXYZ789", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": a2}},
			}[:ncalls]},
		},
		"tools":                 []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "d", "parameters": json.RawMessage(weatherTool.Parameters)}}},
		"add_generation_prompt": false, "bos_token": "<s>", "eos_token": "</s>",
	}
	b, _ := json.Marshal(vars)
	out, err := tm.Render(b)
	if err != nil {
		t.Fatal(err)
	}
	out = out[strings.LastIndex(out, "Weather in Paris?"):]
	i := strings.Index(out, from)
	j := -1
	if i >= 0 && to == "" {
		j = len(out)
	} else if i >= 0 {
		if j = strings.Index(out[i:], to); j >= 0 {
			j += i
		}
	}
	if i < 0 || j < i {
		t.Fatalf("%s: no %q..%q in %q", name, from, to, out)
	}
	return out[i:j]
}

// parse feeds text in random pieces and checks the events add up.
func parse(t *testing.T, f *toolcall.Format, text string, r *rand.Rand) (string, []toolcall.Call) {
	t.Helper()
	p := f.NewParser(testTools)
	var content strings.Builder
	args := map[int]*strings.Builder{}
	names := map[int]string{}
	handle := func(evs []toolcall.Event) {
		for _, e := range evs {
			switch e.Kind {
			case toolcall.Text:
				content.WriteString(e.Text)
			case toolcall.Start:
				if _, dup := names[e.Index]; dup || e.ID == "" || e.Name == "" {
					t.Fatalf("bad start %+v", e)
				}
				names[e.Index] = e.Name
				args[e.Index] = &strings.Builder{}
			case toolcall.Args:
				if args[e.Index] == nil {
					t.Fatalf("arguments before start: %+v", e)
				}
				args[e.Index].WriteString(e.Text)
			}
		}
	}
	for rest := text; rest != ""; {
		n := 1 + r.IntN(8)
		if n > len(rest) {
			n = len(rest)
		}
		handle(p.Feed(rest[:n]))
		rest = rest[n:]
	}
	handle(p.Close())
	calls := p.Calls()
	if len(calls) != len(names) {
		t.Fatalf("%d calls, %d starts", len(calls), len(names))
	}
	for i, c := range calls {
		if names[i] != c.Name || args[i].String() != c.Arguments {
			t.Fatalf("streamed call %d %q %q, final %+v", i, names[i], args[i].String(), c)
		}
	}
	if content.String() != p.Content() {
		t.Fatalf("streamed content %q, final %q", content.String(), p.Content())
	}
	return p.Content(), calls
}

func sameJSON(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

func TestTemplateOutputs(t *testing.T) {
	cases := []struct {
		template string
		format   *toolcall.Format
		from, to string
		lead     string // what the model writes before the call ("Let me check.\n" when "")
		ncalls   int    // calls the template renders in one turn (2 when 0)
	}{
		{"Qwen-Qwen2.5-7B-Instruct", toolcall.Hermes, "<tool_call>", "<|im_end|>", "", 0},
		{"Qwen-Qwen3-0.6B", toolcall.Hermes, "<tool_call>", "<|im_end|>", "", 0},
		{"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", toolcall.Hermes, "<tool_call>", "<|im_end|>", "", 0},
		{"meta-llama-Llama-3.1-8B-Instruct", toolcall.Llama3, `{"name"`, "<|eot_id|>", "", 0},
		{"meta-llama-Llama-3.2-3B-Instruct", toolcall.Llama3, `{"name"`, "<|eot_id|>", "", 0},
		{"mistralai-Mistral-Nemo-Instruct-2407", toolcall.Mistral, "[TOOL_CALLS]", "</s>", "", 0},
		{"Mistral-Small-3.2-24B-Instruct-2506", toolcall.MistralV11, "[TOOL_CALLS]", "</s>", "", 0},
		{"unsloth-mistral-Devstral-Small-2507", toolcall.MistralV11, "[TOOL_CALLS]", "</s>", "", 0},
		{"deepseek-ai-DeepSeek-V3.1", toolcall.DeepSeekV3, "<｜tool▁calls▁begin｜>", "<｜end▁of▁sentence｜>", "", 0},
		{"moonshotai-Kimi-K2", toolcall.KimiK2, "<|tool_calls_section_begin|>", "<|im_end|>", "", 0},
		{"Qwen3-Coder", toolcall.QwenXML, "<tool_call>", "<|im_end|>", "", 0},
		{"Qwen3.5-4B", toolcall.QwenXML, "<tool_call>", "<|im_end|>", "", 0},
		{"GLM-4.6", toolcall.GLM, "<tool_call>", "", "", 0},
		{"GLM-4.7-Flash", toolcall.GLM, "<tool_call>", "", "", 0},
		{"poolside-Laguna-XS-2.1", toolcall.GLM, "<tool_call>", "</assistant>", "", 0},
		{"LFM2.5-8B-A1B", toolcall.LFM2, "<|tool_call_start|>", "<|im_end|>", "", 0},
		{"ByteDance-Seed-OSS", toolcall.SeedOSS, "<seed:tool_call>", "<seed:eos>", "", 0},
		{"MiniMax-M2", toolcall.MiniMax, "<minimax:tool_call>", "[e~[", "", 0},
		{"NVIDIA-Nemotron-Nano-v2", toolcall.Nemotron, "<TOOLCALL>", "<SPECIAL_12>", "", 0},
		{"fireworks-ai-llama-3-firefunction-v2", toolcall.FireFunc, " functools", "<|eot_id|>", "", 0},
		// The output follows the prompt's <|start|>assistant; the template
		// renders one call per turn, with to= before the channel.
		{"openai-gpt-oss-120b", toolcall.Harmony, " to=functions.", "", "<|channel|>analysis<|message|>Let me check.<|end|><|start|>assistant", 1},
		// The output follows the prompt's >>>: text is addressed to all.
		{"meetkai-functionary-medium-v3.2", toolcall.Functionary, ">>>get_weather", "<|eot_id|>", "all\nLet me check.\n", 0},
		{"CohereForAI-c4ai-command-r-plus-tool_use", toolcall.CommandR, "\nAction:", "<|START_OF_TURN_TOKEN|>", "", 0},
		{"CohereForAI-c4ai-command-r7b-12-2024-tool_use", toolcall.CommandR7B, "<|START_ACTION|>", "<|END_OF_TURN_TOKEN|>", "<|START_THINKING|>Let me check.<|END_THINKING|>", 0},
		{"Cohere2MoE", toolcall.CommandR7B, "<|START_ACTION|>", "<|END_OF_TURN_TOKEN|>", "<|START_THINKING|>Let me check.<|END_THINKING|>", 0},
	}
	want := []toolcall.Call{{Name: "get_weather", Arguments: `{"city":"Paris","days":3}`}, {Name: "get_weather", Arguments: `{"city":"Nice"}`}}
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range cases {
		t.Run(c.template, func(t *testing.T) {
			src, _ := readTemplate(c.template)
			if f, ok := toolcall.Detect(string(src)); !ok || f != c.format {
				t.Fatalf("detected %v (%v), want %s", f.Name, ok, c.format.Name)
			}
			n := len(want)
			if c.format == toolcall.Llama3 {
				n = 1 // the Llama 3 templates render one call per turn
			}
			if c.ncalls > 0 {
				n = c.ncalls
			}
			lead := "Let me check.\n"
			if c.lead != "" {
				lead = c.lead
			}
			text := render(t, c.template, c.from, c.to, n)
			for trial := 0; trial < 5; trial++ {
				content, calls := parse(t, c.format, lead+text, r)
				if content != "Let me check." && !(c.format == toolcall.Llama3 && content != "") {
					t.Errorf("content %q", content)
				}
				if c.format == toolcall.Llama3 {
					// A bare call only opens the output.
					content, calls = parse(t, c.format, text, r)
					if content != "" {
						t.Errorf("content %q", content)
					}
				}
				if len(calls) != n {
					t.Fatalf("%q: calls %+v", text, calls)
				}
				for i := range n {
					if calls[i].Name != want[i].Name || !sameJSON(calls[i].Arguments, want[i].Arguments) {
						t.Errorf("%q: call %d %+v, want %+v", text, i, calls[i], want[i])
					}
				}
			}
		})
	}
}

func TestPlainTextAndMalformed(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		f          *toolcall.Format
		text, want string
		calls      int
	}{
		{toolcall.Hermes, "Hello <b>world</b>  \n", "Hello <b>world</b>  \n", 0},
		{toolcall.Hermes, "<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", 0},
		{toolcall.Hermes, `<tool_call>{"arguments": {"a": 1}, "name": "f"}</tool_call>`, "", 1},
		{toolcall.Hermes, `<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>`, "", 1},
		{toolcall.Llama3, `The answer is {"x": 1}`, `The answer is {"x": 1}`, 0},
		{toolcall.Llama3, `{"name": "Ann", "parameters": {"age": 3}}`, `{"name": "Ann", "parameters": {"age": 3}}`, 0},
		{toolcall.Llama3, `{"name": "get_weather", "parameters": {"city": "Oslo"}}`, "", 1},
		{toolcall.Llama3, `<|python_tag|>{"name": "f", "parameters": {}}`, "", 1},
		{toolcall.Llama3, `<|python_tag|>brave_search.call(query="weather in Paris", n=3, exact=True)`, "", 1},
		{toolcall.Llama3, `<|python_tag|>print(1 + 1)`, `<|python_tag|>print(1 + 1)`, 0},
		{toolcall.LFM2, `<|tool_call_start|>[f(a='x\'y', b=[1, 2.5, None], c={'k': False}), g()]<|tool_call_end|>done`, "done", 2},
		{toolcall.LFM2, `<|tool_call_start|>[f(a=]<|tool_call_end|>`, `<|tool_call_start|>[f(a=]<|tool_call_end|>`, 0},
		{toolcall.Llama3, `{"name": "f", "parameters": {"a": [1, {"b": "}"}]}}; {"name": "g", "parameters": {}}`, "", 2},
		{toolcall.MistralV11, "[TOOL_CALLS]f[ARGS]{\"q\": \"a}b\"}[TOOL_CALLS]g[ARGS]{}", "", 2},
		{toolcall.Hermes, `<tool_call>{"name": "f", "arguments": {"a": tru`, "", 1}, // cut short by max_tokens
		{toolcall.Harmony, "<|channel|>analysis<|message|>Think. <|end|><|start|>assistant<|channel|>final<|message|>Sunny.<|return|>", "Think.\n\nSunny.", 0},
		{toolcall.Harmony, "Hello, no header  ", "Hello, no header  ", 0},
		{toolcall.Harmony, "<|channel|>analysis<|message|>Need f and g.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": \"<|end|>\"}<|call|>" +
			"<|start|>assistant to=functions.g<|channel|>commentary json<|message|>{}<|call|>", "Need f and g.", 2},
		{toolcall.Harmony, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": tru", "", 1},
		{toolcall.Harmony, "<|channel|>final<|message|>Done.<|return|>", "Done.", 0},
		{toolcall.Harmony, "<|channel|>commentary to=functions. <|constrain|>json<|message|>{}<|call|>", "{}", 0},
		{toolcall.Functionary, "get_weather\n{\"city\": \">>>x\"}>>>f\n{}", "", 2},
		{toolcall.Functionary, "all\nIt is 3 >>> 2, and a>>>b\nc.", "It is 3 >>> 2, and a>>>b\nc.", 0},
		{toolcall.Functionary, "Hello there", "Hello there", 0},
		{toolcall.Functionary, "python\nprint(1)", "python\nprint(1)", 0},
		{toolcall.Functionary, "f\n{\"a\": tru", "", 1},
		{toolcall.CommandR7B, "<|START_THINKING|>Plan. <|END_THINKING|><|START_RESPONSE|>Answer.<|END_RESPONSE|>", "Plan.\n\nAnswer.", 0},
		{toolcall.CommandR7B, "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {}}]<|END_ACTION|>", "", 1},
		{toolcall.CommandR, "Action: ```json[{\"tool_name\": \"f\", \"parameters\": {\"a\": \"x\\ny\"}}]```Done.", "Done.", 1},
		{toolcall.CommandR, "Action: I will search. Action:", "Action: I will search. Action:", 0},
		{toolcall.CommandR, "Action:\n```json\n[{\"tool_name\": \"directly-answer\", \"parameters\": {}}]\n```", "", 0},
		{toolcall.CommandR, "Plan.\nAction:\n```json\n[{\"tool_name\": \"directly-answer\", \"parameters\": {}}, {\"tool_name\": \"f\", \"parameters\": {\"a\": \"```\"}}]\n```", "Plan.", 1},
		{toolcall.CommandR, "Action: [{\"tool_name\": \"f\", \"parameters\": {}}, {\"parameters\": {}, \"tool_name\": \"g\"}]", "", 2},
	} {
		content, calls := parse(t, c.f, c.text, r)
		if content != c.want || len(calls) != c.calls {
			t.Errorf("%s %q: content %q, calls %+v", c.f.Name, c.text, content, calls)
		}
		for _, call := range calls {
			if strings.HasSuffix(c.text, "tru") {
				continue
			}
			if !json.Valid([]byte(call.Arguments)) {
				t.Errorf("%q: arguments %q", c.text, call.Arguments)
			}
		}
	}
}

// The grammar of a forced call produces text the parser reads back as
// that call with schema-valid arguments, in every format.
func TestGrammarRoundTrip(t *testing.T) {
	other := toolcall.Tool{Name: "get_time", Parameters: json.RawMessage(`{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"],"additionalProperties":false}`)}
	r := rand.New(rand.NewPCG(9, 10))
	for _, f := range toolcall.Formats {
		g, err := f.Grammar([]toolcall.Tool{weatherTool, other}, nil)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		var text string
		switch f.Name {
		case "mistral-v11":
			text = `[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}`
		case "deepseek-v3.1":
			text = `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{"tz": "CET"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`
		case "harmony":
			text = `<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{"tz": "CET"}`
		case "command-r7b":
			text = "<|START_ACTION|>[" + `{"tool_name": "get_time", "parameters": {"tz": "CET"}}` + "]<|END_ACTION|>"
		case "command-r":
			text = "Action:\n```json\n[" + `{"tool_name": "get_time", "parameters": {"tz": "CET"}}` + "]\n```"
		case "functionary-v3.2":
			text = "get_time\n" + `{"tz": "CET"}`
		case "kimi-k2":
			text = `<|tool_calls_section_begin|><|tool_call_begin|>get_time<|tool_call_argument_begin|>{"tz": "CET"}<|tool_call_end|><|tool_calls_section_end|>`
		default:
			key := "arguments"
			if f == toolcall.Llama3 {
				key = "parameters"
			}
			body := `{"name": "get_time", "` + key + `": {"tz": "CET"}}`
			switch {
			case f == toolcall.Llama3:
				text = body
			case f == toolcall.Hermes || f == toolcall.QwenXML || f == toolcall.GLM || f == toolcall.SeedOSS || f == toolcall.MiniMax:
				text = f.Begin + "\n" + body + "\n" + f.End
			case f == toolcall.LFM2:
				text = f.Begin + body + f.End
			case f == toolcall.Nemotron:
				text = "<TOOLCALL>[" + body + "]</TOOLCALL>"
			default:
				text = f.Begin + "[" + body + "]"
			}
		}
		if !g.Match([]byte(text)) {
			t.Errorf("%s: grammar refuses %q", f.Name, text)
			continue
		}
		if g.Match([]byte(strings.Replace(text, "CET", "PST", 1))) {
			t.Errorf("%s: grammar takes an enum value outside the schema", f.Name)
		}
		_, calls := parse(t, f, text, r)
		if len(calls) != 1 || calls[0].Name != "get_time" || !sameJSON(calls[0].Arguments, `{"tz":"CET"}`) {
			t.Errorf("%s: %q parsed as %+v", f.Name, text, calls)
		}
	}
	if _, err := toolcall.Hermes.Grammar(nil, nil); err == nil {
		t.Error("a grammar of no tools")
	}
	if _, err := toolcall.Hermes.Grammar([]toolcall.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","patternProperties":{}}`)}}, nil); err == nil || !strings.Contains(err.Error(), "patternProperties") {
		t.Errorf("unsupported keyword: %v", err)
	}
}

func TestIDs(t *testing.T) {
	if id := toolcall.Mistral.NewID(); len(id) != 9 || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "" {
		t.Errorf("mistral id %q", id)
	}
	if a, b := toolcall.Hermes.NewID(), toolcall.Hermes.NewID(); a == b || !strings.HasPrefix(a, "call_") {
		t.Errorf("ids %q %q", a, b)
	}
}

// Splitting the text anywhere gives the same parse, and nothing panics.
func FuzzParser(f *testing.F) {
	f.Add(`Hi <tool_call>{"name": "f", "arguments": {"a": "x"}}</tool_call>`, uint64(1), uint8(0))
	f.Add(`{"name": "f", "parameters": {"a": [1, 2]}}`, uint64(2), uint8(1))
	f.Add("[TOOL_CALLS]f[ARGS]{\"a\": 1}", uint64(3), uint8(3))
	f.Add("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", uint64(4), uint8(9))
	f.Add("<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>", uint64(5), uint8(10))
	f.Add("<|tool_call_start|>[f(a='x', b=[1, None])]<|tool_call_end|>", uint64(6), uint8(11))
	f.Add("<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>", uint64(7), uint8(14))
	f.Add("all\nSure.>>>f\n{\"a\": [1, \">>>\"]}>>>g\n{}", uint64(8), uint8(15))
	f.Add("Action:\n```json\n[{\"tool_name\": \"f\", \"parameters\": {\"a\": 1}}]\n```", uint64(9), uint8(16))
	f.Add("<|START_THINKING|>a<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"f\", \"parameters\": {}}]<|END_ACTION|>", uint64(10), uint8(17))
	f.Fuzz(func(t *testing.T, text string, seed uint64, which uint8) {
		if len(text) > 4096 {
			return
		}
		fm := toolcall.Formats[int(which)%len(toolcall.Formats)]
		whole := fm.NewParser(testTools)
		whole.Feed(text)
		whole.Close()
		r := rand.New(rand.NewPCG(seed, seed))
		content, calls := parse(t, fm, text, r)
		if content != whole.Content() || len(calls) != len(whole.Calls()) {
			t.Fatalf("split parse %q %+v, whole %q %+v", content, calls, whole.Content(), whole.Calls())
		}
		for i, c := range calls {
			if c.Name != whole.Calls()[i].Name || c.Arguments != whole.Calls()[i].Arguments {
				t.Fatalf("call %d: %+v vs %+v", i, c, whole.Calls()[i])
			}
		}
	})
}
