package grammar_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jitllm/jitllm/runtime/grammar"
)

func jsonText(s string) string {
	var w bytes.Buffer
	enc := json.NewEncoder(&w)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(w.String(), "\n")
}

func TestPattern(t *testing.T) {
	cases := []struct {
		pat       string
		good, bad []string
	}{
		{`^[a-z]{2,3}-\d+$`, []string{"ab-1", "xyz-0042"}, []string{"a-1", "abcd-1", "ab-", "AB-1", "ab-1 "}},
		{`^(?:cat|dog)s?$`, []string{"cat", "dogs"}, []string{"cats!", "bird", ""}},
		{`b+`, []string{"b", "abba", "xxbxx"}, []string{"", "aaa"}},
		{`^[^"\\]*$`, []string{"", "plain é text"}, []string{`a"b`, `a\b`}},
		{`^a"b\\c$`, []string{`a"b\c`}, []string{`a"bc`}},
		{`^\s\S\w\W\D$`, []string{" x_!x", "\tée-é"}, []string{"xx_!x", " x_a1"}},
		{`^.$`, []string{"a", "é", "\t"}, []string{"\n", "ab", ""}},
		{`^é+(?<n>x|\x41)$`, []string{"éx", "ééA"}, []string{"x", "éB"}},
		{`^\u0041/[\n]$`, []string{"A/\n"}, []string{"A/n"}},
		{``, []string{"", "anything"}, nil},
		{`^a{2}b{1,}c{0,1}$`, []string{"aab", "aabbbc"}, []string{"ab", "aac", "aabcc"}},
	}
	for _, c := range cases {
		raw, _ := json.Marshal(map[string]any{"type": "string", "pattern": c.pat})
		g, err := grammar.CompileSchema(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		for _, s := range c.good {
			if !g.Match([]byte(jsonText(s))) {
				t.Errorf("%s: %q should match", c.pat, s)
			}
		}
		for _, s := range c.bad {
			if g.Match([]byte(jsonText(s))) {
				t.Errorf("%s: %q should not match", c.pat, s)
			}
		}
	}
	// Escaped forms of the same characters match too.
	g, err := grammar.CompileSchema([]byte(`{"type":"string","pattern":"^[\\n/\\u0001]+$"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"\n"`, `"\u000a"`, `"\u000A"`, `"/\/"`, `"\u0001"`} {
		if !g.Match([]byte(s)) {
			t.Errorf("%s should match", s)
		}
	}
}

// randPattern makes a pattern of the supported subset and a sampler of
// strings it matches.
func randPattern(r *rand.Rand, depth int) (string, func() string) {
	type piece struct {
		pat string
		gen func() string
	}
	atom := func() piece {
		pick := func(s string) func() string {
			rs := []rune(s)
			return func() string { return string(rs[r.IntN(len(rs))]) }
		}
		switch r.IntN(9) {
		case 0:
			return piece{`[a-c]`, pick("abc")}
		case 1:
			return piece{`[^a-z"]`, pick("0_!é\\")}
		case 2:
			return piece{`\d`, pick("0123456789")}
		case 3:
			return piece{`\w`, pick("aZ_9")}
		case 4:
			return piece{`\s`, pick(" \t\n")}
		case 5:
			return piece{`\W`, pick("-é\"/")}
		case 6:
			return piece{`.`, pick("a\"\\é\t")}
		case 7:
			if depth < 2 {
				p1, g1 := randPattern(r, depth+1)
				p2, g2 := randPattern(r, depth+1)
				return piece{"(?:" + p1 + "|" + p2 + ")", func() string {
					if r.IntN(2) == 0 {
						return g1()
					}
					return g2()
				}}
			}
		}
		ch := string([]rune("ab\"\\/.é-+*")[r.IntN(10)])
		return piece{regexp.QuoteMeta(ch), func() string { return ch }}
	}
	var parts []piece
	for range 1 + r.IntN(3) {
		a := atom()
		if strings.HasPrefix(a.pat, "(?:") {
			parts = append(parts, a) // groups may be nullable: not quantified
			continue
		}
		lo, hi := 1, 1
		q := ""
		switch r.IntN(5) {
		case 0:
			q, lo, hi = "?", 0, 1
		case 1:
			q, lo, hi = "*", 0, 3
		case 2:
			q, lo, hi = "+", 1, 3
		case 3:
			lo = r.IntN(3)
			hi = lo + r.IntN(3)
			q = fmt.Sprintf("{%d,%d}", lo, hi)
		}
		parts = append(parts, piece{a.pat + q, func() string {
			var b strings.Builder
			for range lo + r.IntN(hi-lo+1) {
				b.WriteString(a.gen())
			}
			return b.String()
		}})
	}
	var pat strings.Builder
	for _, p := range parts {
		pat.WriteString(p.pat)
	}
	return pat.String(), func() string {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.gen())
		}
		return b.String()
	}
}

// Random patterns: generated strings validate (Go regexp, through the
// independent validator), and sampled matching strings are accepted.
func TestRandomPatterns(t *testing.T) {
	tok := stories(t)
	v := grammar.NewVocab(tok)
	r := rand.New(rand.NewPCG(21, 22))
	logits := make([]float32, tok.VocabSize())
	n := 200
	if testing.Short() {
		n = 50
	}
	done := 0
	for i := 0; i < n; i++ {
		pat, gen := randPattern(r, 0)
		anchored := r.IntN(3) != 0
		if anchored {
			pat = "^" + pat + "$"
		}
		raw, _ := json.Marshal(map[string]any{"type": "string", "pattern": pat})
		g, err := grammar.CompileSchema(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		re := regexp.MustCompile(pat)
		for range 5 {
			s := gen()
			if !anchored && r.IntN(2) == 0 {
				s = "x" + s + "é"
			}
			if !re.MatchString(s) {
				t.Fatalf("sampler bug: %q does not match %s", s, pat)
			}
			if !g.Match([]byte(jsonText(s))) {
				t.Fatalf("%s refuses the matching %s", pat, jsonText(s))
			}
		}
		var doc any
		json.Unmarshal(raw, &doc)
		comp := jsonschema.NewCompiler()
		comp.AddResource("s.json", doc)
		vs, err := comp.Compile("s.json")
		if err != nil {
			t.Fatal(err)
		}
		text, ok := walk(t, grammar.NewConstraint(g, v), tok, r, logits, 120)
		if !ok {
			continue
		}
		done++
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			t.Fatalf("%s: output %q is not JSON: %v", pat, text, err)
		}
		if err := vs.Validate(inst); err != nil {
			t.Fatalf("%s: output %q does not validate: %v", pat, text, err)
		}
	}
	if done < n/3 {
		t.Errorf("only %d of %d walks completed", done, n)
	}
}

func FuzzPattern(f *testing.F) {
	for _, s := range []string{`^[a-z]+\d{2,3}$`, `(?:a|b)*c`, `[^\s"]+`, `a(?=b)`, `é.\W`} {
		f.Add(s, "ab12")
	}
	f.Fuzz(func(t *testing.T, pat, s string) {
		if len(pat) > 256 || len(s) > 256 {
			return
		}
		raw, _ := json.Marshal(map[string]any{"type": "string", "pattern": pat})
		g, err := grammar.CompileSchema(raw)
		if err != nil {
			return
		}
		re, err := regexp.Compile(pat)
		if err != nil {
			return // a subset pattern Go reads differently is not comparable
		}
		// What the grammar accepts, Go's regexp matches.
		if text := jsonText(s); g.Match([]byte(text)) && !re.MatchString(s) {
			t.Fatalf("pattern %q: grammar accepts %s, regexp does not", pat, text)
		}
	})
}
