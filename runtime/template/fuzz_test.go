package template

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzTemplate compiles and renders arbitrary chat templates (a GGUF's
// tokenizer.chat_template is whatever its author wrote) with a short
// conversation: Compile and Render return an error or text, never panic.
// The seeds are the real templates of testdata/templates/models and a few
// broken ones.
func FuzzTemplate(f *testing.F) {
	paths, _ := filepath.Glob("testdata/templates/models/*")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	for _, s := range []string{"{{", "{% for m in messages %}{{ m.content }}{% endfor %}", "{{ messages[0]['content'] | upper }}",
		"{% set x = namespace(a=1) %}{{ x.a }}", "{{ raise_exception('no') }}", "{% if %}", "{{ 1/0 }}", "{{ messages | tojson(indent=2) }}"} {
		f.Add(s)
	}
	vars := []byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Again"}],"add_generation_prompt":true,"bos_token":"<s>","eos_token":"</s>"}`)
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Compile(src)
		if err != nil {
			return
		}
		_, _ = tpl.Render(vars)
	})
}

// A macro that calls itself forever, or two that call each other, fail the
// render with an error (the library would recurse until the Go stack
// overflows, a fatal error); recursion as deep as maxMacroDepth renders,
// and the guards leave a trimmed macro's output as it was.
func TestMacroDepth(t *testing.T) {
	for _, src := range []string{
		"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
		"{%- macro a() -%}{{ b() }}{%- endmacro -%}{%- macro b() -%}{{ a() }}{%- endmacro -%}{{ a() }}",
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := tpl.Render([]byte(`{}`)); err == nil || !strings.Contains(err.Error(), "macros nest deeper") {
			t.Errorf("%q: %q, %v", src, out, err)
		}
	}
	deep, err := Compile("{% macro f(n) %}{% if n > 0 %}({{ f(n - 1) }}){% endif %}{% endmacro %}{{ f(" + strconv.Itoa(maxMacroDepth-1) + ") }}")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := deep.Render([]byte(`{}`)); err != nil || len(out) != 2*(maxMacroDepth-1) {
		t.Errorf("%d levels: %d bytes, %v", maxMacroDepth, len(out), err)
	}
	trimmed, err := Compile("{%- macro g(x) -%}\n  [{{ x }}]\n  {%- endmacro %}\n{{ g(1) }}|{{ g(2) }}")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := trimmed.Render([]byte(`{}`)); err != nil || out != "[1]|[2]" {
		t.Errorf("trimmed macro: %q, %v", out, err)
	}
	// trim_blocks and lstrip_blocks (Hugging Face's settings): the newline
	// after each block tag goes, the indentation before one too
	plain, err := Compile("{% macro g(x) %}\n  [{{ x }}]\n  {% endmacro %}\n{{ g(1) }}|")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := plain.Render([]byte(`{}`)); err != nil || out != "  [1]\n|" {
		t.Errorf("plain macro: %q, %v", out, err)
	}
}

// range() is Python's (the library's: start, stop, step, negative steps,
// empty ranges) up to maxRange items and an error past it, also where
// start and stop are far apart at the ends of int64.
func TestBoundedRange(t *testing.T) {
	render := func(src string) (string, error) {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		return tpl.Render([]byte(`{}`))
	}
	for src, want := range map[string]string{
		"{{ range(4) | list }}":                               "[0, 1, 2, 3]",
		"{{ range(2, 5) | list }}":                            "[2, 3, 4]",
		"{{ range(0, 7, 3) | list }}":                         "[0, 3, 6]",
		"{{ range(5, 0, -2) | list }}":                        "[5, 3, 1]",
		"{{ range(3, 3) | list }}":                            "[]",
		"{{ range(-2) | list }}":                              "[]",
		"{{ range(100000) | length }}":                        "100000",
		"{% for i in range(2) %}{{ loop.index }}{% endfor %}": "12",
	} {
		if out, err := render(src); err != nil || out != want {
			t.Errorf("%s: %q, %v; want %q", src, out, err, want)
		}
	}
	for _, src := range []string{"{{ range(100001) | length }}", "{% for i in range(10**9) %}x{% endfor %}",
		"{{ range(9223372036854775807, -9223372036854775807, -2) | length }}", "{{ range(1, 2, 0) }}"} {
		if out, err := render(src); err == nil {
			t.Errorf("%s: %.40q without an error", src, out)
		}
	}
}

// Loops end the render past maxIterations in all (nested loops over large
// ranges would run for hours), loop filters' collecting loops included;
// loops that stay under it render as before.
func TestLoopBound(t *testing.T) {
	for _, src := range []string{
		"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
		"{% for i in range(100000) %}{% for j in range(100000) if j > 5 %}{% endfor %}{% endfor %}",
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if out, err := tpl.Render([]byte(`{}`)); err == nil || !strings.Contains(err.Error(), "loop iterations") {
			t.Errorf("%s: %.40q, %v", src, out, err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%s: stopped after %v", src, d)
		}
	}
	tpl, err := Compile("{% for i in range(3) if i != 1 %}{{ loop.index }}{{ i }}{% else %}none{% endfor %}|{% for x in [] %}{% else %}empty{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tpl.Render([]byte(`{}`)); err != nil || out != "1022|empty" {
		t.Errorf("loops under the bound: %q, %v", out, err)
	}
}

// tojson's indent is Python's " " * N: none below 1, and one past
// maxJSONIndent fails the render rather than repeating it on every line.
func TestToJSONIndentBound(t *testing.T) {
	for src, want := range map[string]string{
		`{{ {"a": [1]} | tojson(indent=-3) }}`: "{\n\"a\": [\n1\n]\n}",
		`{{ {"a": 1} | tojson(indent=2) }}`:    "{\n  \"a\": 1\n}",
	} {
		tpl, err := Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := tpl.Render([]byte(`{}`)); err != nil || out != want {
			t.Errorf("%s: %q, %v; want %q", src, out, err, want)
		}
	}
	tpl, err := Compile(`{{ {"a": 1} | tojson(indent=1000000000) }}`)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := tpl.Render([]byte(`{}`)); err == nil || !strings.Contains(err.Error(), "indent") {
		t.Errorf("indent 10⁹: %.40q, %v; want an indent error", out, err)
	}
}
