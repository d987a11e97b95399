package toolcall_test

import (
	"encoding/json"
	"testing"

	"github.com/jitllm/jitllm/runtime/grammar"
	"github.com/jitllm/jitllm/runtime/toolcall"
)

// fakeVocab: 0 is end of generation, 1 and 2 are Mistral's control tokens
// [TOOL_CALLS] and [ARGS] (no bytes), then one token per printable byte.
type fakeVocab struct{}

func (fakeVocab) VocabSize() int { return 3 + 95 }
func (fakeVocab) Piece(id int32) []byte {
	if id < 3 {
		return nil
	}
	return []byte{byte(id - 3 + 32)}
}
func (fakeVocab) IsEOG(id int32) bool { return id == 0 }
func (fakeVocab) Token(id int32) string {
	switch id {
	case 0:
		return "</s>"
	case 1:
		return "[TOOL_CALLS]"
	case 2:
		return "[ARGS]"
	}
	return string(rune(id - 3 + 32))
}

func allowed(c *grammar.Constraint, id int32) bool { return c.Allowed()[id/64]&(1<<(id%64)) != 0 }

// A forced call in a format whose markers are control tokens: the grammar
// asks for the tokens themselves, and the parser reads them as their text.
func TestSpecialTokenMarkers(t *testing.T) {
	v := grammar.NewVocab(fakeVocab{})
	tool := toolcall.Tool{Name: "get_time", Parameters: json.RawMessage(`{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}`)}
	g, err := toolcall.MistralV11.Grammar([]toolcall.Tool{tool}, v)
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, v)
	p := toolcall.MistralV11.NewParser([]toolcall.Tool{tool})
	markers := map[int32]string{}
	for _, m := range toolcall.MistralV11.Markers() {
		if id, ok := v.SpecialID(m); ok {
			markers[id] = m
		}
	}
	if len(markers) != 2 {
		t.Fatalf("markers %v", markers)
	}
	feed := func(id int32) {
		t.Helper()
		if !allowed(c, id) {
			t.Fatalf("token %d (%q) not allowed", id, fakeVocab{}.Token(id))
		}
		if err := c.Accept(id); err != nil {
			t.Fatal(err)
		}
		if m, ok := markers[id]; ok {
			p.Feed(m)
		} else {
			p.Feed(string(fakeVocab{}.Piece(id)))
		}
	}
	byteID := func(b byte) int32 { return int32(b) - 32 + 3 }
	if allowed(c, byteID('g')) || allowed(c, 0) || allowed(c, 2) {
		t.Fatal("the call must open with the [TOOL_CALLS] token")
	}
	feed(1)
	for _, b := range []byte("get_tim") {
		feed(byteID(b))
	}
	if allowed(c, 2) {
		t.Fatal("[ARGS] before the name is complete")
	}
	feed(byteID('e'))
	feed(2)
	for _, b := range []byte(`{"tz": "CET"}`) {
		feed(byteID(b))
	}
	if !c.Done() {
		t.Fatal("not done after the call")
	}
	p.Close()
	if calls := p.Calls(); len(calls) != 1 || calls[0].Name != "get_time" || calls[0].Arguments != `{"tz": "CET"}` || len(calls[0].ID) != 9 {
		t.Fatalf("calls %+v", calls)
	}
}

// harmonyVocab is gpt-oss's layout in small: 0-1 end generation
// (<|return|>, <|call|>), 2-6 are the other harmony control tokens, then
// one token per printable byte.
type harmonyVocab struct{}

var harmonySpecials = []string{"<|return|>", "<|call|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"}

func (harmonyVocab) VocabSize() int { return len(harmonySpecials) + 95 }
func (harmonyVocab) Piece(id int32) []byte {
	if int(id) < len(harmonySpecials) {
		return nil
	}
	return []byte{byte(int(id) - len(harmonySpecials) + 32)}
}
func (harmonyVocab) IsEOG(id int32) bool { return id < 2 }
func (harmonyVocab) Token(id int32) string {
	if int(id) < len(harmonySpecials) {
		return harmonySpecials[id]
	}
	return string(rune(int(id) - len(harmonySpecials) + 32))
}

// A forced harmony call asks for the header's control tokens and ends
// where <|call|> (an end-of-generation token) may follow.
func TestHarmonyForcedTokens(t *testing.T) {
	v := grammar.NewVocab(harmonyVocab{})
	tool := toolcall.Tool{Name: "get_time", Parameters: json.RawMessage(`{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}`)}
	g, err := toolcall.Harmony.Grammar([]toolcall.Tool{tool}, v)
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, v)
	p := toolcall.Harmony.NewParser([]toolcall.Tool{tool})
	byteID := func(b byte) int32 { return int32(b) - 32 + int32(len(harmonySpecials)) }
	feed := func(id int32) {
		t.Helper()
		if !allowed(c, id) {
			t.Fatalf("token %d (%q) not allowed", id, harmonyVocab{}.Token(id))
		}
		if err := c.Accept(id); err != nil {
			t.Fatal(err)
		}
		p.Feed(harmonyVocab{}.Token(id)) // control tokens as their text, as the server feeds markers
	}
	if allowed(c, byteID('<')) || allowed(c, 1) {
		t.Fatal("the call must open with the <|channel|> token")
	}
	feed(2)
	for _, b := range []byte("commentary to=functions.get_time ") {
		feed(byteID(b))
	}
	feed(3)
	for _, b := range []byte("json") {
		feed(byteID(b))
	}
	feed(4)
	for _, b := range []byte(`{"tz": "CET"`) {
		feed(byteID(b))
	}
	if allowed(c, 1) {
		t.Fatal("<|call|> before the arguments are complete")
	}
	feed(byteID('}'))
	if !allowed(c, 1) {
		t.Fatal("<|call|> refused after the call")
	}
	feed(1)
	p.Close()
	if calls := p.Calls(); len(calls) != 1 || calls[0].Name != "get_time" || calls[0].Arguments != `{"tz": "CET"}` || p.Content() != "" {
		t.Fatalf("calls %+v, content %q", calls, p.Content())
	}
	got := map[string]bool{}
	for _, m := range toolcall.Harmony.Markers() {
		got[m] = true
	}
	for _, m := range harmonySpecials {
		if !got[m] {
			t.Errorf("marker %s missing", m)
		}
	}
}
