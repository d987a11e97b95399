package toolcall

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// pyCall is a call written as Python: name(key=value, ...).
type pyCall struct {
	name string
	args string // JSON object
}

// parsePyCalls reads "[f(a=1), g(b='x')]" (list) or "f(a=1)" / Llama's
// "f.call(a=1)"; ok is false unless all of s is such calls.
func parsePyCalls(s string, list bool) ([]pyCall, bool) {
	p := &pyParser{s: s}
	p.ws()
	var calls []pyCall
	if list {
		if !p.eat('[') {
			return nil, false
		}
	}
	for {
		p.ws()
		c, ok := p.call()
		if !ok {
			return nil, false
		}
		calls = append(calls, c)
		p.ws()
		if !list || !p.eat(',') {
			break
		}
	}
	if list && !p.eat(']') {
		return nil, false
	}
	p.ws()
	return calls, p.i == len(p.s) && len(calls) > 0
}

type pyParser struct {
	s     string
	i     int
	depth int
}

func (p *pyParser) ws() {
	for p.i < len(p.s) && isWS(p.s[p.i]) {
		p.i++
	}
}

func (p *pyParser) eat(c byte) bool {
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func isIdent(c byte, first bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && (c >= '0' && c <= '9' || c == '.' || c == '-')
}

func (p *pyParser) ident() string {
	p.ws()
	j := p.i
	for p.i < len(p.s) && isIdent(p.s[p.i], p.i == j) {
		p.i++
	}
	return p.s[j:p.i]
}

func (p *pyParser) call() (pyCall, bool) {
	name := strings.TrimSuffix(p.ident(), ".call")
	if name == "" || !p.eat('(') {
		return pyCall{}, false
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for n := 0; ; n++ {
		if p.eat(')') {
			break
		}
		if n > 0 && !p.eat(',') {
			return pyCall{}, false
		}
		if p.eat(')') { // trailing comma
			break
		}
		key := p.ident()
		if key == "" || !p.eat('=') {
			return pyCall{}, false
		}
		if n > 0 {
			b.WriteString(", ")
		}
		kj, _ := json.Marshal(key)
		b.Write(kj)
		b.WriteString(": ")
		if !p.value(&b) {
			return pyCall{}, false
		}
	}
	b.WriteByte('}')
	return pyCall{name: name, args: b.String()}, true
}

// value converts one Python literal to JSON.
func (p *pyParser) value(b *bytes.Buffer) bool {
	if p.depth++; p.depth > 64 {
		return false
	}
	defer func() { p.depth-- }()
	p.ws()
	if p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"' || c == '\'':
		s, ok := p.str(c)
		if !ok {
			return false
		}
		j, _ := json.Marshal(s)
		b.Write(j)
		return true
	case c == '[' || c == '(':
		end := byte(']')
		if c == '(' {
			end = ')'
		}
		p.i++
		b.WriteByte('[')
		for n := 0; ; n++ {
			if p.eat(end) {
				break
			}
			if n > 0 {
				if !p.eat(',') {
					return false
				}
				if p.eat(end) { // trailing comma
					break
				}
				b.WriteString(", ")
			}
			if !p.value(b) {
				return false
			}
		}
		b.WriteByte(']')
		return true
	case c == '{':
		p.i++
		b.WriteByte('{')
		for n := 0; ; n++ {
			if p.eat('}') {
				break
			}
			if n > 0 && !p.eat(',') {
				return false
			}
			if p.eat('}') {
				break
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '"' && p.s[p.i] != '\'' {
				return false
			}
			k, ok := p.str(p.s[p.i])
			if !ok || !p.eat(':') {
				return false
			}
			if n > 0 {
				b.WriteString(", ")
			}
			kj, _ := json.Marshal(k)
			b.Write(kj)
			b.WriteString(": ")
			if !p.value(b) {
				return false
			}
		}
		b.WriteByte('}')
		return true
	}
	j := p.i
	for p.i < len(p.s) && !strings.ContainsRune(",)]} \n\t\r", rune(p.s[p.i])) {
		p.i++
	}
	switch w := p.s[j:p.i]; w {
	case "True", "true":
		b.WriteString("true")
	case "False", "false":
		b.WriteString("false")
	case "None", "null":
		b.WriteString("null")
	default:
		f, err := strconv.ParseFloat(w, 64)
		if err != nil || !json.Valid([]byte(w)) {
			if err != nil {
				return false
			}
			nj, _ := json.Marshal(f)
			b.Write(nj)
			return true
		}
		b.WriteString(w)
	}
	return true
}

// str reads a quoted Python string.
func (p *pyParser) str(q byte) (string, bool) {
	p.i++
	var out strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == q:
			return out.String(), true
		case c == '\\' && p.i < len(p.s):
			e := p.s[p.i]
			p.i++
			switch e {
			case 'n':
				out.WriteByte('\n')
			case 't':
				out.WriteByte('\t')
			case 'r':
				out.WriteByte('\r')
			default:
				out.WriteByte(e)
			}
		default:
			out.WriteByte(c)
		}
	}
	return "", false
}
