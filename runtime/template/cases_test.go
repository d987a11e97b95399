package template

import (
	"time"

	"encoding/json"
	"github.com/ardanlabs/jinja"
	"os"
	"testing"
)

type hfCase struct {
	Name         string          `json:"name"`
	ChatTemplate string          `json:"chat_template"`
	Data         json.RawMessage `json:"data"`
	Target       string          `json:"target"`
}

func TestHFCases(t *testing.T) {
	b, err := os.ReadFile("testdata/templates/hf_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []hfCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	// Known misses, each with why it is not fixed.
	known := map[string]string{
		// tools|string: the target prints the list as JSON (double quotes,
		// \" escapes); Python's jinja2 (3.1.6, checked) prints str(list),
		// Python's repr with single quotes, and so do we:
		// testdata/templates/jinja2_cases.json holds jinja2's own output of
		// this template and data, which TestJinja2Cases requires.
		"MadeAgents/Hammer2.1": "the target is not Python's str() of the tools list",
	}
	pass := 0
	for _, c := range cases {
		c := c
		t := &caseT{T: t, known: known[c.Name]}
		tm, err := Compile(c.ChatTemplate)
		if err != nil {
			t.Errorf("%s: compile: %v", c.Name, err)
			continue
		}
		v, err := ParseJSON(c.Data)
		if err != nil {
			t.Fatal(err)
		}
		data := map[string]jinja.Value{}
		for _, k := range v.AsDict().Keys {
			data[k], _ = v.AsDict().Get(k)
		}
		// The expected outputs were rendered on 10 July 2025 (SmolLM3
		// prints the date).
		data["strftime_now"] = strftimeNow(func() time.Time { return time.Date(2025, 7, 10, 12, 0, 0, 0, time.UTC) })
		got, err := tm.RenderValues(data)
		if err != nil {
			t.Errorf("%s: render: %v", c.Name, err)
			continue
		}
		if got != c.Target {
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, c.Target)
			continue
		}
		pass++
	}
	t.Logf("%d of %d cases render exactly", pass, len(cases))
	if pass < len(cases)-len(known) {
		t.Errorf("%d of %d cases render exactly, want at least %d", pass, len(cases), len(cases)-len(known))
	}
}

// caseT reports a known miss as a log line, not a failure.
type caseT struct {
	*testing.T
	known string
}

func (c *caseT) Errorf(format string, args ...any) {
	if c.known != "" {
		c.T.Logf("known miss (%s): "+format, append([]any{c.known}, args...)...)
		return
	}
	c.T.Helper()
	c.T.Errorf(format, args...)
}

// TestJinja2Cases renders templates whose targets were printed by Python's
// jinja2 3.1.6 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// as transformers' apply_chat_template): str() of nested values through the
// string filter, and calls with *args and **kwargs.
func TestJinja2Cases(t *testing.T) {
	b, err := os.ReadFile("testdata/templates/jinja2_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []hfCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		tm, err := Compile(c.ChatTemplate)
		if err != nil {
			t.Errorf("%s: compile: %v", c.Name, err)
			continue
		}
		got, err := tm.Render(c.Data)
		if err != nil {
			t.Errorf("%s: render: %v", c.Name, err)
			continue
		}
		if got != c.Target {
			t.Errorf("%s:\n got %q\nwant %q", c.Name, got, c.Target)
		}
	}
}

// Spreading a value that is not iterable, or a keyword given twice, is an
// error, as in Python.
func TestStarCallErrors(t *testing.T) {
	for _, src := range []string{
		"{% macro f(a) %}{% endmacro %}{{ f(*1) }}",
		"{% macro f(a) %}{% endmacro %}{{ f(**[1]) }}",
		"{% macro f(a) %}{% endmacro %}{{ f(a=1, **{'a': 2}) }}",
		"{% set g = 1 %}{{ g(*[1]) }}",
	} {
		tm, err := Compile(src)
		if err != nil {
			t.Errorf("%s: compile: %v", src, err)
			continue
		}
		if out, err := tm.Render([]byte(`{}`)); err == nil {
			t.Errorf("%s: rendered %q, want an error", src, out)
		}
	}
}
