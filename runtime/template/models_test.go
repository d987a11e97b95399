package template

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every shipped model template compiles and renders a plain conversation
// (known library limits are logged, not failed; the count is reported).
func TestModelTemplates(t *testing.T) {
	files, err := filepath.Glob("testdata/templates/models/*.jinja")
	if err != nil || len(files) == 0 {
		t.Fatal("no templates", err)
	}
	msgs := []Message{
		{Role: "system", Content: "You are helpful."},
		{Role: "user", Content: "Hello there"},
		{Role: "assistant", Content: "Hi! How can I help?"},
		{Role: "user", Content: "Tell me a story"},
	}
	ok := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := Compile(string(b))
		if err != nil {
			t.Logf("%s: compile: %v", filepath.Base(f), err)
			continue
		}
		out, err := tm.Chat(msgs, ChatOptions{BOS: "<s>", EOS: "</s>", AddGenerationPrompt: true, Now: func() time.Time { return time.Date(2025, 7, 10, 0, 0, 0, 0, time.UTC) }})
		if err != nil {
			t.Logf("%s: render: %v", filepath.Base(f), err)
			continue
		}
		if !strings.Contains(out, "Hello there") || !strings.Contains(out, "Tell me a story") {
			t.Logf("%s: the messages are missing from %q", filepath.Base(f), out)
			continue
		}
		ok++
	}
	t.Logf("%d of %d model templates render a conversation", ok, len(files))
	if ok < len(files)*3/4 {
		t.Errorf("only %d of %d model templates render", ok, len(files))
	}
}
