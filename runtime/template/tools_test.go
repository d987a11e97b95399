package template

import (
	"os"
	"strings"
	"testing"
)

// Message fields and the tools variable reach the template in order:
// Hermes-3's template renders the tool list, the assistant's call and the
// tool's answer from them.
func TestChatToolFields(t *testing.T) {
	b, err := os.ReadFile("testdata/templates/models/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tm, err := Compile(string(b))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{
		{Role: "user", Content: "Weather?"},
		{Role: "assistant", Fields: []byte(`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","days":2}}}]}`)},
		{Role: "tool", Content: "sunny", Fields: []byte(`{"tool_call_id":"c1","name":"get_weather"}`)},
	}
	tools := []byte(`[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`)
	out, err := tm.Chat(msgs, ChatOptions{AddGenerationPrompt: true, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"get_weather(city: str) - Weather of a city",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>",
		"<tool_response>\nsunny\n</tool_response>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if _, err := tm.Chat([]Message{{Role: "user", Fields: []byte(`[1]`)}}, ChatOptions{}); err == nil {
		t.Error("fields that are not an object were accepted")
	}
	if _, err := tm.Chat(msgs[:1], ChatOptions{Tools: []byte(`[`)}); err == nil {
		t.Error("malformed tools were accepted")
	}
}
