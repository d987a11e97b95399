package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A pattern compiles to the JSON-encoded characters of the strings it
// matches. The subset: literals, classes and ranges, \d \w \s (ASCII, as
// Go's regexp reads them) and their negations, ., groups, alternation,
// ? * + {m,n} (lazy forms alike), ^ at the very start and $ at the very
// end; an unanchored side takes any characters, as JSON Schema searches.
// Non-ASCII characters are literals; negated sets (\D \W \S [^..] .) take
// every non-ASCII character.

// cset is a character set: ASCII members, all non-ASCII characters, or
// listed non-ASCII characters.
type cset struct {
	ascii    [2]uint64
	nonASCII bool
	extra    []rune
}

func (s *cset) addASCII(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.ascii[c>>6] |= 1 << (c & 63)
	}
}
func (s *cset) hasASCII(c byte) bool { return s.ascii[c>>6]&(1<<(c&63)) != 0 }

func (s *cset) negate() error {
	if len(s.extra) > 0 {
		return fmt.Errorf("a negated set with non-ASCII members")
	}
	s.ascii[0], s.ascii[1] = ^s.ascii[0], ^s.ascii[1]
	s.nonASCII = !s.nonASCII
	return nil
}

func (s *cset) union(o cset) {
	s.ascii[0] |= o.ascii[0]
	s.ascii[1] |= o.ascii[1]
	s.nonASCII = s.nonASCII || o.nonASCII
	s.extra = append(s.extra, o.extra...)
}

// rx is a parsed pattern node.
type rx struct {
	op       byte // 'c' set, 'q' sequence, 'a' alternation, 'r' repeat
	set      cset
	subs     []*rx
	min, max int // repeat; max < 0 unbounded
}

const maxRepeat = 1000

type rxParser struct {
	s     string
	i     int
	depth int
}

func (p *rxParser) errf(format string, args ...any) error {
	return fmt.Errorf("pattern %q at offset %d: %s", p.s, p.i, fmt.Sprintf(format, args...))
}

func (p *rxParser) alt() (*rx, error) {
	p.depth++
	if p.depth > 100 {
		return nil, p.errf("nested too deeply")
	}
	defer func() { p.depth-- }()
	var alts []*rx
	for {
		q, err := p.concat()
		if err != nil {
			return nil, err
		}
		alts = append(alts, q)
		if p.i < len(p.s) && p.s[p.i] == '|' {
			p.i++
			continue
		}
		break
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &rx{op: 'a', subs: alts}, nil
}

func (p *rxParser) concat() (*rx, error) {
	q := &rx{op: 'q'}
	for p.i < len(p.s) && p.s[p.i] != '|' && p.s[p.i] != ')' {
		a, err := p.atom()
		if err != nil {
			return nil, err
		}
		if a, err = p.quant(a); err != nil {
			return nil, err
		}
		q.subs = append(q.subs, a)
	}
	return q, nil
}

func (p *rxParser) quant(a *rx) (*rx, error) {
	if p.i >= len(p.s) {
		return a, nil
	}
	lo, hi := -1, -1
	switch p.s[p.i] {
	case '?':
		lo, hi = 0, 1
		p.i++
	case '*':
		lo, hi = 0, -1
		p.i++
	case '+':
		lo, hi = 1, -1
		p.i++
	case '{':
		end := strings.IndexByte(p.s[p.i:], '}')
		if end < 0 {
			return nil, p.errf("unclosed {")
		}
		body := p.s[p.i+1 : p.i+end]
		a1, b1, comma := strings.Cut(body, ",")
		var err1, err2 error
		lo, err1 = strconv.Atoi(a1)
		switch {
		case !comma:
			hi = lo
		case b1 == "":
			hi = -1
		default:
			hi, err2 = strconv.Atoi(b1)
		}
		if err1 != nil || err2 != nil || lo < 0 || hi >= 0 && hi < lo {
			return nil, p.errf("bad repetition {%s}", body)
		}
		if lo > maxRepeat || hi > maxRepeat {
			return nil, p.errf("repetition {%s} over %d", body, maxRepeat)
		}
		p.i += end + 1
	default:
		return a, nil
	}
	if p.i < len(p.s) && p.s[p.i] == '?' {
		p.i++ // lazy: the same strings
	}
	if p.i < len(p.s) && strings.IndexByte("?*+{", p.s[p.i]) >= 0 {
		return nil, p.errf("unsupported: a quantifier after a quantifier")
	}
	if nullable(a) {
		return nil, p.errf("unsupported: a quantifier over a part that can match the empty string")
	}
	return &rx{op: 'r', subs: []*rx{a}, min: lo, max: hi}, nil
}

func nullable(r *rx) bool {
	switch r.op {
	case 'c':
		return false
	case 'r':
		return r.min == 0 || nullable(r.subs[0])
	case 'a':
		for _, s := range r.subs {
			if nullable(s) {
				return true
			}
		}
		return false
	}
	for _, s := range r.subs {
		if !nullable(s) {
			return false
		}
	}
	return true
}

func setOf(lo, hi byte) cset { var s cset; s.addASCII(lo, hi); return s }

// classEscape is \d \w \s and their negations.
func classEscape(c byte) (cset, bool) {
	var s cset
	switch c | 0x20 {
	case 'd':
		s.addASCII('0', '9')
	case 'w':
		s.addASCII('0', '9')
		s.addASCII('a', 'z')
		s.addASCII('A', 'Z')
		s.addASCII('_', '_')
	case 's':
		for _, x := range "\t\n\f\r " {
			s.addASCII(byte(x), byte(x))
		}
	default:
		return s, false
	}
	if c >= 'A' && c <= 'Z' {
		s.negate()
	}
	return s, true
}

// escape reads the character after a backslash (p.i at it): a class
// escape (isSet) or one character.
func (p *rxParser) escape(inClass bool) (cs cset, r rune, isSet bool, err error) {
	if p.i >= len(p.s) {
		return cs, 0, false, p.errf("trailing backslash")
	}
	c := p.s[p.i]
	p.i++
	if s, ok := classEscape(c); ok {
		return s, 0, true, nil
	}
	switch c {
	case 'n':
		return cs, '\n', false, nil
	case 't':
		return cs, '\t', false, nil
	case 'r':
		return cs, '\r', false, nil
	case 'f':
		return cs, '\f', false, nil
	case 'v':
		return cs, '\v', false, nil
	case 'u', 'x':
		n := 4
		if c == 'x' {
			n = 2
		}
		if p.i+n > len(p.s) {
			return cs, 0, false, p.errf("short \\%c escape", c)
		}
		v, e := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
		if e != nil {
			return cs, 0, false, p.errf("bad \\%c escape", c)
		}
		p.i += n
		return cs, rune(v), false, nil
	case 'b', 'B':
		if inClass && c == 'b' {
			return cs, '\b', false, nil
		}
		return cs, 0, false, p.errf("unsupported: word boundary \\%c", c)
	case 'p', 'P':
		return cs, 0, false, p.errf("unsupported: Unicode property escape \\%c", c)
	case 'k':
		return cs, 0, false, p.errf("unsupported: backreference \\k")
	}
	if c >= '1' && c <= '9' {
		return cs, 0, false, p.errf("unsupported: backreference \\%c", c)
	}
	if c == '0' {
		return cs, 0, false, nil
	}
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 {
		return cs, 0, false, p.errf("unsupported escape \\%c", c)
	}
	return cs, rune(c), false, nil // an escaped punctuation character
}

func (p *rxParser) char() (rune, error) {
	r, n := utf8.DecodeRuneInString(p.s[p.i:])
	if r == utf8.RuneError && n <= 1 {
		return 0, p.errf("invalid UTF-8")
	}
	p.i += n
	return r, nil
}

func runeSet(r rune) (cset, error) {
	var s cset
	if r < 0x80 {
		s.addASCII(byte(r), byte(r))
		return s, nil
	}
	if r >= 0xd800 && r <= 0xdfff {
		return s, fmt.Errorf("a surrogate code point")
	}
	s.extra = []rune{r}
	return s, nil
}

func (p *rxParser) class() (*rx, error) {
	p.i++ // [
	neg := false
	if p.i < len(p.s) && p.s[p.i] == '^' {
		neg = true
		p.i++
	}
	var set cset
	first := true
	for {
		if p.i >= len(p.s) {
			return nil, p.errf("unclosed [")
		}
		if p.s[p.i] == ']' && !first {
			p.i++
			break
		}
		first = false
		lo, isSet, s, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if isSet {
			set.union(s)
			continue
		}
		if p.i+1 < len(p.s) && p.s[p.i] == '-' && p.s[p.i+1] != ']' {
			p.i++
			hi, hiSet, _, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if hiSet {
				return nil, p.errf("a class escape ends a range")
			}
			if hi < lo {
				return nil, p.errf("range out of order")
			}
			if hi >= 0x80 {
				return nil, p.errf("unsupported: a range reaching past ASCII")
			}
			set.addASCII(byte(lo), byte(hi))
			continue
		}
		rs, err := runeSet(lo)
		if err != nil {
			return nil, p.errf("%v", err)
		}
		set.union(rs)
	}
	if neg {
		if err := set.negate(); err != nil {
			return nil, p.errf("unsupported: %v", err)
		}
	}
	return &rx{op: 'c', set: set}, nil
}

func (p *rxParser) classAtom() (rune, bool, cset, error) {
	if p.s[p.i] == '\\' {
		p.i++
		s, r, isSet, err := p.escape(true)
		return r, isSet, s, err
	}
	if strings.HasPrefix(p.s[p.i:], "[:") {
		return 0, false, cset{}, p.errf("unsupported: POSIX class")
	}
	r, err := p.char()
	return r, false, cset{}, err
}

func (p *rxParser) atom() (*rx, error) {
	c := p.s[p.i]
	switch c {
	case '(':
		p.i++
		if strings.HasPrefix(p.s[p.i:], "?") {
			switch {
			case strings.HasPrefix(p.s[p.i:], "?:"):
				p.i += 2
			case strings.HasPrefix(p.s[p.i:], "?="), strings.HasPrefix(p.s[p.i:], "?!"),
				strings.HasPrefix(p.s[p.i:], "?<="), strings.HasPrefix(p.s[p.i:], "?<!"):
				return nil, p.errf("unsupported: lookaround")
			case strings.HasPrefix(p.s[p.i:], "?<"), strings.HasPrefix(p.s[p.i:], "?P<"):
				end := strings.IndexByte(p.s[p.i:], '>')
				if end < 0 {
					return nil, p.errf("unclosed group name")
				}
				p.i += end + 1
			default:
				return nil, p.errf("unsupported: group flags (?...)")
			}
		}
		r, err := p.alt()
		if err != nil {
			return nil, err
		}
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, p.errf("unclosed (")
		}
		p.i++
		return r, nil
	case '[':
		return p.class()
	case '.':
		p.i++
		s := setOf('\n', '\n')
		s.addASCII('\r', '\r')
		s.negate()
		return &rx{op: 'c', set: s}, nil
	case '\\':
		p.i++
		s, r, isSet, err := p.escape(false)
		if err != nil {
			return nil, err
		}
		if !isSet {
			if s, err = runeSet(r); err != nil {
				return nil, p.errf("%v", err)
			}
		}
		return &rx{op: 'c', set: s}, nil
	case '^', '$':
		return nil, p.errf("unsupported: anchor %c inside the pattern (only ^ at the start and $ at the end)", c)
	case '*', '+', '?', '{':
		return nil, p.errf("nothing to repeat")
	}
	r, err := p.char()
	if err != nil {
		return nil, err
	}
	s, err := runeSet(r)
	if err != nil {
		return nil, p.errf("%v", err)
	}
	return &rx{op: 'c', set: s}, nil
}

// parsePattern parses pat; start/end say whether it is anchored.
func parsePattern(pat string) (r *rx, start, end bool, err error) {
	if len(pat) > 4096 {
		return nil, false, false, fmt.Errorf("pattern longer than 4096 bytes")
	}
	body := pat
	if strings.HasPrefix(body, "^") {
		start, body = true, body[1:]
	}
	if strings.HasSuffix(body, "$") {
		bs := 0 // backslashes before the $: odd escapes it
		for i := len(body) - 2; i >= 0 && body[i] == '\\'; i-- {
			bs++
		}
		if bs%2 == 0 {
			end, body = true, body[:len(body)-1]
		}
	}
	p := &rxParser{s: body}
	if r, err = p.alt(); err != nil {
		return nil, false, false, err
	}
	if p.i != len(body) {
		return nil, false, false, p.errf("unmatched )")
	}
	if r.op == 'a' && (start || end) {
		return nil, false, false, fmt.Errorf("pattern %q: unsupported: an anchor beside a top-level | (group it: ^(a|b)$)", pat)
	}
	return r, start, end, nil
}

// pattern compiles a string schema's pattern: the quoted JSON string.
func (c *compiler) pattern(pat, path string) (seq, error) {
	r, start, end, err := parsePattern(pat)
	if err != nil {
		return nil, c.fail(path+"/pattern", "%v", err)
	}
	body := c.rxSeq(r)
	q := c.b.lit(`"`)
	out := q
	if !start {
		out = append(out, c.b.star(seq{c.char()}))
	}
	out = append(out, body...)
	if !end {
		out = append(out, c.b.star(seq{c.char()}))
	}
	return append(out, q...), c.b.err
}

func (c *compiler) rxSeq(r *rx) seq {
	b := c.b
	switch r.op {
	case 'c':
		return seq{c.csetElem(&r.set)}
	case 'q':
		var out seq
		for _, s := range r.subs {
			out = append(out, c.rxSeq(s)...)
		}
		return out
	case 'a':
		alts := make([]seq, len(r.subs))
		for i, s := range r.subs {
			alts[i] = c.rxSeq(s)
		}
		return seq{b.rule(alts...)}
	}
	return b.repeat(seq{b.rule(c.rxSeq(r.subs[0]))}, r.min, r.max)
}

// csetElem is one character of s as it appears inside a JSON string:
// raw, or escaped where JSON requires.
func (c *compiler) csetElem(s *cset) elem {
	b := c.b
	var raw byteSet
	var alts []seq
	for x := 0; x < 0x80; x++ {
		ch := byte(x)
		if !s.hasASCII(ch) {
			continue
		}
		switch {
		case ch == '"' || ch == '\\':
			alts = append(alts, b.lit(`\`+string(ch)))
		case ch < 0x20:
			short := map[byte]string{'\n': `\n`, '\t': `\t`, '\r': `\r`, '\b': `\b`, '\f': `\f`}[ch]
			if short != "" {
				alts = append(alts, b.lit(short))
			}
			alts = append(alts, b.lit(fmt.Sprintf(`\u%04x`, ch)), b.lit(fmt.Sprintf(`\u%04X`, ch)))
		default:
			raw.add(ch, ch)
			if ch == '/' {
				alts = append(alts, b.lit(`\/`))
			}
		}
	}
	if raw != (byteSet{}) {
		alts = append(alts, seq{b.set(raw)})
	}
	if s.nonASCII {
		alts = append(alts, seq{c.nonASCII()})
	}
	for _, r := range s.extra {
		alts = append(alts, b.lit(string(r)))
	}
	if len(alts) == 0 {
		b.err = fmt.Errorf("grammar: a character class matches nothing")
		return b.chars()
	}
	if len(alts) == 1 && len(alts[0]) == 1 {
		return alts[0][0]
	}
	return b.rule(alts...)
}

// nonASCII is one well-formed multi-byte UTF-8 character.
func (c *compiler) nonASCII() elem {
	return c.generic("nonascii", func() seq {
		b := c.b
		cont := b.chars(0x80, 0xbf)
		return seq{b.rule(
			seq{b.chars(0xc2, 0xdf), cont},
			seq{b.chars(0xe0, 0xe0), b.chars(0xa0, 0xbf), cont},
			seq{b.chars(0xe1, 0xec, 0xee, 0xef), cont, cont},
			seq{b.chars(0xed, 0xed), b.chars(0x80, 0x9f), cont},
			seq{b.chars(0xf0, 0xf0), b.chars(0x90, 0xbf), cont, cont},
			seq{b.chars(0xf1, 0xf3), cont, cont, cont},
			seq{b.chars(0xf4, 0xf4), b.chars(0x80, 0x8f), cont, cont},
		)}
	})
}
