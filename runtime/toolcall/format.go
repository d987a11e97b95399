// Package toolcall knows how each model family writes tool calls: it
// detects a model's format from its chat template, parses generated text
// into calls (name, JSON arguments, id) incrementally so that a server can
// stream them, and builds the grammar that forces a call in that format
// (tool_choice "required" or a named function).
package toolcall

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jitllm/jitllm/runtime/grammar"
)

// Tool is a function the model may call.
type Tool struct {
	Name       string
	Parameters json.RawMessage // a JSON schema; nil = any object
}

// Call is one parsed tool call.
type Call struct {
	ID        string
	Name      string
	Arguments string // JSON text
}

type kind uint8

const (
	kJSON        kind = iota // call objects {"name":..., "arguments":...} between markers
	kNameArgs                // begin NAME sep {arguments} end
	kXML                     // <function=NAME><parameter=K>V</parameter></function>
	kGLM                     // NAME<arg_key>K</arg_key><arg_value>V</arg_value>
	kPy                      // [name(key=value, ...), ...] in Python syntax
	kHarmony                 // gpt-oss: messages with headers; a call is one addressed to=functions.NAME
	kFunctionary             // >>>NAME\n{arguments}, >>>all\ntext
)

// Format is one family's tool-call syntax.
type Format struct {
	Name string
	kind kind
	// Begin starts a call (or, with array, a list of calls); End ends it
	// ("" = a call runs to the end of its JSON).
	Begin, End string
	array      bool     // the body is a JSON array of call objects
	argsKeys   []string // keys that hold the arguments, the first is written
	bare       bool     // a call object may also open the output without Begin
	sep        string   // kNameArgs: between the name and the arguments
	ignore     []string // section markers around calls, dropped
	idLen      int      // 0: "call_" + 24 random characters; n: n alphanumerics (Mistral)
	nameFix    func(string) string
	xml        *xmlTags
	extra      []string // more marker texts the parser reads (harmony's message framing)
	nameKey    string   // kJSON: the key of the name ("" = "name")
	fence      bool     // kJSON: the body may sit in a ``` fence after Begin (Command R)
	skip       string   // a call of this name is no call (Command R's directly-answer)
	para       bool     // the ignore markers separate messages: their texts are paragraphs
}

// nameK is the key of a call object's name.
func (f *Format) nameK() string {
	if f.nameKey == "" {
		return "name"
	}
	return f.nameKey
}

// xmlTags spell an XML-style call: fn NAME fnEnd (param KEY paramEnd VALUE
// paramClose)* fnClose, one or more per Begin ... End.
type xmlTags struct{ fn, fnEnd, fnClose, param, paramEnd, paramClose string }

var (
	qwenTags    = &xmlTags{"<function=", ">", "</function>", "<parameter=", ">", "</parameter>"}
	minimaxTags = &xmlTags{`<invoke name="`, `">`, "</invoke>", `<parameter name="`, `">`, "</parameter>"}
)

// The formats. Hermes is also the default for models whose template names
// none (and for those with no template).
var (
	Hermes = &Format{Name: "hermes", kind: kJSON, Begin: "<tool_call>", End: "</tool_call>", argsKeys: []string{"arguments", "parameters"}}
	Llama3 = &Format{Name: "llama3", kind: kJSON, Begin: "<|python_tag|>", argsKeys: []string{"parameters", "arguments"}, bare: true}
	// Mistral v3 (Nemo, Small 3.0): [TOOL_CALLS][{"name":..., "arguments":..., "id":...}]
	Mistral = &Format{Name: "mistral", kind: kJSON, Begin: "[TOOL_CALLS]", array: true, argsKeys: []string{"arguments"}, idLen: 9}
	// Mistral v11+ (Small 3.2, Devstral, Ministral 3): [TOOL_CALLS]name[ARGS]{...}
	MistralV11 = &Format{Name: "mistral-v11", kind: kNameArgs, Begin: "[TOOL_CALLS]", sep: "[ARGS]", idLen: 9}
	Granite    = &Format{Name: "granite", kind: kJSON, Begin: "<|tool_call|>", array: true, argsKeys: []string{"arguments"}}
	Nemotron   = &Format{Name: "nemotron", kind: kJSON, Begin: "<TOOLCALL>", End: "</TOOLCALL>", array: true, argsKeys: []string{"arguments"}}
	FireFunc   = &Format{Name: "firefunction", kind: kJSON, Begin: " functools", array: true, argsKeys: []string{"arguments"}}
	DeepSeekV3 = &Format{Name: "deepseek-v3.1", kind: kNameArgs, Begin: "<｜tool▁call▁begin｜>", sep: "<｜tool▁sep｜>", End: "<｜tool▁call▁end｜>",
		ignore: []string{"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"}}
	KimiK2 = &Format{Name: "kimi-k2", kind: kNameArgs, Begin: "<|tool_call_begin|>", sep: "<|tool_call_argument_begin|>", End: "<|tool_call_end|>",
		ignore: []string{"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"}, nameFix: kimiName}
	// Qwen3-Coder, Qwen3.5, Nemotron 3, StepFun: XML parameters inside
	// <tool_call>; a JSON body (Hermes) is accepted too.
	QwenXML = &Format{Name: "qwen3-coder", kind: kXML, Begin: "<tool_call>", End: "</tool_call>", argsKeys: []string{"arguments", "parameters"}, xml: qwenTags}
	SeedOSS = &Format{Name: "seed-oss", kind: kXML, Begin: "<seed:tool_call>", End: "</seed:tool_call>", argsKeys: []string{"arguments", "parameters"}, xml: qwenTags}
	MiniMax = &Format{Name: "minimax-m2", kind: kXML, Begin: "<minimax:tool_call>", End: "</minimax:tool_call>", argsKeys: []string{"arguments", "parameters"}, xml: minimaxTags}
	// GLM-4.5+ (and Laguna): <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>;
	// a JSON body is accepted too.
	GLM = &Format{Name: "glm", kind: kGLM, Begin: "<tool_call>", End: "</tool_call>", argsKeys: []string{"arguments", "parameters"}}
	// LFM2 (Liquid): <|tool_call_start|>[name(key=value)]<|tool_call_end|>; a JSON body is accepted too.
	LFM2 = &Format{Name: "lfm2", kind: kPy, Begin: "<|tool_call_start|>", End: "<|tool_call_end|>", argsKeys: []string{"arguments", "parameters"}}
	// gpt-oss (harmony): <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>;
	// the text of the other messages (analysis, final) is content.
	Harmony = &Format{Name: "harmony", kind: kHarmony, Begin: "<|channel|>", End: "<|call|>",
		extra: []string{"<|start|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>"}}
	// Functionary v3.2: >>>NAME\n{...} per call, >>>all\n before text.
	Functionary = &Format{Name: "functionary-v3.2", kind: kFunctionary, Begin: ">>>"}
	// Command R / R+: Action:\n```json\n[{"tool_name": ..., "parameters": ...}]```; a call
	// of directly-answer means no call.
	CommandR = &Format{Name: "command-r", kind: kJSON, Begin: "Action:", End: "```", array: true, argsKeys: []string{"parameters"},
		nameKey: "tool_name", fence: true, skip: "directly-answer"}
	// Command R7B / Command A: <|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}]<|END_ACTION|>;
	// the plan (thinking) and the response are content, a paragraph each.
	CommandR7B = &Format{Name: "command-r7b", kind: kJSON, Begin: "<|START_ACTION|>", End: "<|END_ACTION|>", array: true,
		argsKeys: []string{"parameters"}, nameKey: "tool_name", para: true,
		ignore: []string{"<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"}}
)

// Formats lists every format, for tests and docs.
var Formats = []*Format{Hermes, Llama3, Mistral, MistralV11, Granite, Nemotron, FireFunc, DeepSeekV3, KimiK2, QwenXML, SeedOSS, MiniMax, GLM, LFM2, Harmony, Functionary, CommandR, CommandR7B}

// kimiName turns "functions.get_weather:0" into "get_weather".
func kimiName(s string) string {
	s = strings.TrimPrefix(s, "functions.")
	if i := strings.LastIndexByte(s, ':'); i > 0 {
		s = s[:i]
	}
	return s
}

// Detect picks the format a chat template writes tool calls in; ok is
// false when the template shows none (the caller may still use Hermes).
func Detect(template string) (f *Format, ok bool) {
	has := func(s string) bool { return strings.Contains(template, s) }
	switch {
	case has("<|channel|>") && has("<|start|>assistant"):
		return Harmony, true
	case has(">>>all"):
		return Functionary, true
	case has("<|START_ACTION|>"):
		return CommandR7B, true
	case has("Action:") && has(`"tool_name"`):
		return CommandR, true
	case has("[TOOL_CALLS]") && has("[ARGS]"):
		return MistralV11, true
	case has("[TOOL_CALLS]"):
		return Mistral, true
	case has("<seed:tool_call>"):
		return SeedOSS, true
	case has("<minimax:tool_call>"):
		return MiniMax, true
	case has("<function=") && has("<parameter="):
		return QwenXML, true
	case has("<arg_key>"):
		return GLM, true
	case has("<tool_call>"):
		return Hermes, true
	case has("<|tool_call|>"):
		return Granite, true
	case has("<TOOLCALL>"):
		return Nemotron, true
	case has("functools["):
		return FireFunc, true
	case has("tool▁sep"):
		return DeepSeekV3, true
	case has("<|tool_call_start|>"):
		return LFM2, true
	case has("<|tool_call_begin|>"):
		return KimiK2, true
	case has("<|python_tag|>") || has("\"parameters\": dictionary of argument name"):
		return Llama3, true
	}
	return Hermes, false
}

// Markers are the texts of the format's special tokens: a server feeds a
// generated control token (which decodes to no text) to the parser as
// its text when it is one of these.
func (f *Format) Markers() []string {
	out := []string{f.Begin}
	for _, s := range []string{f.End, f.sep} {
		if s != "" {
			out = append(out, s)
		}
	}
	return append(append(out, f.ignore...), f.extra...)
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// NewID makes a call id in the form the family's template accepts.
func (f *Format) NewID() string {
	n, prefix := 24, "call_"
	if f.idLen > 0 {
		n, prefix = f.idLen, ""
	}
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return prefix + string(b)
}

// Grammar is the grammar of exactly one call of one of tools in f's
// syntax, the arguments valid against the tool's parameter schema. A
// marker the vocabulary has as a control token is matched as that token.
func (f *Format) Grammar(tools []Tool, v *grammar.Vocab) (*grammar.Grammar, error) {
	if len(tools) == 0 {
		return nil, fmt.Errorf("toolcall: no tools to call")
	}
	mark := func(s string) grammar.Part {
		if v != nil {
			if id, ok := v.SpecialID(s); ok {
				return grammar.Special(id)
			}
		}
		return grammar.Lit(s)
	}
	var alts [][]grammar.Part
	for _, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object"}`)
		}
		name, _ := json.Marshal(t.Name)
		var p []grammar.Part
		switch f.kind {
		case kHarmony:
			// No <|call|> after the arguments: it ends generation (an EOG
			// token, never a special one the grammar can ask for).
			p = []grammar.Part{mark(f.Begin), grammar.Lit("commentary to=functions." + t.Name + " "), mark("<|constrain|>"),
				grammar.Lit("json"), mark("<|message|>"), grammar.Schema(params)}
		case kNameArgs:
			p = []grammar.Part{grammar.Lit(t.Name), mark(f.sep), grammar.Schema(params)}
		case kFunctionary: // the prompt ends with >>>
			p = []grammar.Part{grammar.Lit(t.Name + "\n"), grammar.Schema(params)}
		default: // kJSON, and kXML whose parser takes a JSON body too
			key, _ := json.Marshal(f.argsKeys[0])
			nk, _ := json.Marshal(f.nameK())
			p = []grammar.Part{grammar.Lit(`{` + string(nk) + `: ` + string(name) + `, ` + string(key) + `: `), grammar.Schema(params), grammar.Lit("}")}
		}
		alts = append(alts, p)
	}
	var parts []grammar.Part
	switch {
	case f.kind == kHarmony || f.kind == kFunctionary: // each alternative is a whole call: the prompt ends with <|start|>assistant / >>>
		parts = append(parts, grammar.Choice(alts...))
	case f.kind == kXML || f.kind == kGLM:
		parts = append(parts, mark(f.Begin), grammar.Lit("\n"), grammar.Choice(alts...), grammar.Lit("\n"), mark(f.End))
	case f.fence:
		parts = append(parts, mark(f.Begin), grammar.Lit("\n```json\n["), grammar.Choice(alts...), grammar.Lit("]\n"), mark(f.End))
	case f.array:
		parts = append(parts, mark(f.Begin), grammar.Lit("["), grammar.Choice(alts...), grammar.Lit("]"))
		if f.End != "" {
			parts = append(parts, mark(f.End))
		}
	default:
		parts = append(parts, mark(f.Begin))
		if f.kind == kJSON && f.End != "" {
			parts = append(parts, grammar.Lit("\n"), grammar.Choice(alts...), grammar.Lit("\n"), mark(f.End))
		} else {
			parts = append(parts, grammar.Choice(alts...))
			if f.End != "" {
				parts = append(parts, mark(f.End))
			}
		}
	}
	if f.bare { // Llama 3 writes custom tool calls without the tag
		parts = []grammar.Part{grammar.Choice(alts...)}
	}
	if len(f.ignore) == 2 && !f.para { // the section markers around the calls
		parts = append(append([]grammar.Part{mark(f.ignore[0])}, parts...), mark(f.ignore[1]))
	}
	return grammar.Sequence(parts...)
}
