package tokenizer

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
)

// Regexes exactly as llama.cpp lists them per pre-tokenizer. Two of them have
// hand-written splitters (as in llama.cpp) and never reach the regex engine.
const (
	reGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	reLlama3 = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reQwen2  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reQwen35 = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reGPT4o  = `[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reTekken = `[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reDSv3   = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	reSeed   = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+`
	reBloom  = ` ?[^(\s|.,!?…。，、।۔،)]+`
	// Some letters are written escaped: they are NFC singletons and must
	// survive editors that normalize text.
	reDSLLMLetters = `\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+`
)

// preType describes one tokenizer.ggml.pre family.
type preType struct {
	regexes      []string
	ignoreMerges bool // whole-word vocab hit skips merging (llama3 and kin)
	addBOS       bool // default add_bos for this family
	chatGLM      bool // no BOS token at all
}

var preTypes = map[string]preType{}

func regPre(names []string, p preType) {
	for _, n := range names {
		preTypes[n] = p
	}
}

func init() {
	regPre([]string{"default"}, preType{regexes: []string{
		`[\p{P}\$\+<=>\^~\|]+`, reGPT2, `\p{N}+`, `[0-9][0-9][0-9]`}})
	regPre([]string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
		preType{regexes: []string{reLlama3}, ignoreMerges: true, addBOS: true})
	regPre([]string{"dbrx", "smaug-bpe"}, preType{regexes: []string{reLlama3}})
	regPre([]string{"deepseek-llm"}, preType{regexes: []string{
		"[\r\n]", reDSLLMLetters, `\s?[!-/:-~！-／：-～‘-‟　-。]+`, `\s+\z`, `[一-龥ࠀ-一가-퟿]+`, `\p{N}+`}})
	regPre([]string{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"}, preType{regexes: []string{
		`\p{N}{1,3}`, `[一-龥぀-ゟ゠-ヿ]+`, reDSv3}})
	regPre([]string{"deepseek-coder"}, preType{regexes: []string{
		"[\r\n]", `\s?\p{L}+`, `\s?\p{P}+`, `[一-龥ࠀ-一가-퟿]+`, `\p{N}`}})
	regPre([]string{"falcon"}, preType{regexes: []string{
		`[\p{P}\$\+<=>\^~\|` + "`" + `]+`, reGPT2, `[0-9][0-9][0-9]`}})
	regPre([]string{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
		preType{regexes: []string{`\p{N}`, reGPT2}})
	regPre([]string{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
		"modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "jina-v1-en", "jina-v2-code", "roberta-bpe"},
		preType{regexes: []string{reGPT2}})
	regPre([]string{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open", "megrez", "grok-2"},
		preType{regexes: []string{reQwen2}})
	regPre([]string{"qwen35"}, preType{regexes: []string{reQwen35}})
	regPre([]string{"poro-chat", "bloom", "gpt3-finnish"}, preType{regexes: []string{reBloom}})
	regPre([]string{"viking"}, preType{regexes: []string{reBloom, `\p{N}`}})
	regPre([]string{"glm4", "chatglm-bpe"}, preType{regexes: []string{reLlama3}, chatGLM: true})
	regPre([]string{"tekken"}, preType{regexes: []string{reTekken}, ignoreMerges: true, addBOS: true})
	regPre([]string{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, preType{regexes: []string{reGPT4o}})
	regPre([]string{"seed-coder"}, preType{regexes: []string{reSeed}})
	regPre([]string{"chameleon"}, preType{regexes: []string{
		`<sentinel:[0-9]+>`, `(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z`, "([\\t\\n]|    |  )", `\p{N}`,
		`[\p{P}!-/:-@\[-` + "`" + `{-~]`, reGPT2}, addBOS: true})
}

// Collapsed placeholders: in the collapsed text every non-ASCII codepoint is
// replaced by one rune standing for its category, so that a regex written
// with \p{..} classes can run with ASCII-only classes (llama.cpp's trick;
// reproducing it keeps the splits identical to llama.cpp's).
const (
	phOther  = 0xD0
	phNumber = 0xD1
	phLetter = 0xD2
	phPunct  = 0xD3
	phMark   = 0xD4
	phSymbol = 0xD5
)

var ucatClass = map[string]string{
	`\p{N}`:  string(rune(phNumber)) + `0-9`,
	`\p{L}`:  string(rune(phLetter)) + `A-Za-z`,
	`\p{Lu}`: string(rune(phLetter)) + `A-Za-z`,
	`\p{Ll}`: string(rune(phLetter)) + `A-Za-z`,
	`\p{Lt}`: string(rune(phLetter)) + `A-Za-z`,
	`\p{Lm}`: string(rune(phLetter)) + `A-Za-z`,
	`\p{Lo}`: string(rune(phLetter)) + `A-Za-z`,
	`\p{P}`:  string(rune(phPunct)) + `!-#%-*,-/:-;?-@\[-\]_\{\}`,
	`\p{M}`:  string(rune(phMark)),
	`\p{S}`:  string(rune(phSymbol)) + `\$\+<->\^` + "`" + `\|`,
}

func usesCategories(re string) bool {
	for k := range ucatClass {
		if strings.Contains(re, k) {
			return true
		}
	}
	return false
}

// collapseRegex rewrites \p{..} classes into placeholder + ASCII classes.
func collapseRegex(re string) (string, error) {
	for _, r := range re {
		if r >= 128 {
			return "", fmt.Errorf("regex mixes unicode categories and non-ASCII characters: %q", re)
		}
	}
	var b strings.Builder
	inside := false
	for i := 0; i < len(re); i++ {
		c := re[i]
		if c == '[' && (i == 0 || re[i-1] != '\\') {
			b.WriteByte('[')
			inside = true
			continue
		}
		if inside && c == ']' && re[i-1] != '\\' {
			b.WriteByte(']')
			inside = false
			continue
		}
		if c == '\\' && i+3 < len(re) && re[i+1] == 'p' && re[i+2] == '{' {
			if j := strings.IndexByte(re[i+3:], '}'); j >= 0 {
				pat := re[i : i+3+j+1]
				if cls, ok := ucatClass[pat]; ok {
					if !inside {
						b.WriteByte('[')
					}
					b.WriteString(cls)
					if !inside {
						b.WriteByte(']')
					}
					i += 3 + j
					continue
				}
			}
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

type splitStep struct {
	custom    func(cpts []rune, offsets []int) []int
	re        *regexp2.Regexp
	collapsed bool
}

type preTokenizer struct {
	steps        []splitStep
	needCollapse bool
}

func newPreTokenizer(regexes []string) (*preTokenizer, error) {
	p := &preTokenizer{}
	for _, re := range regexes {
		switch re {
		case reGPT2:
			p.steps = append(p.steps, splitStep{custom: splitGPT2})
			continue
		case reLlama3:
			p.steps = append(p.steps, splitStep{custom: splitLlama3})
			continue
		}
		st := splitStep{collapsed: usesCategories(re)}
		pat := re
		if st.collapsed {
			var err error
			if pat, err = collapseRegex(re); err != nil {
				return nil, err
			}
			p.needCollapse = true
		}
		c, err := regexp2.Compile(pat, regexp2.ECMAScript)
		if err != nil {
			return nil, fmt.Errorf("pre-tokenizer regex %q: %w", re, err)
		}
		st.re = c
		p.steps = append(p.steps, st)
	}
	return p, nil
}

// split returns the pre-tokenized words of text as codepoint slices of cpts.
func (p *preTokenizer) split(cpts []rune) ([]int, error) {
	offsets := []int{len(cpts)}
	if len(cpts) == 0 {
		return nil, nil
	}
	var collapsed, wide []rune
	for _, st := range p.steps {
		if st.custom != nil {
			offsets = st.custom(cpts, offsets)
			continue
		}
		var text []rune
		if st.collapsed {
			if collapsed == nil {
				collapsed = collapseText(cpts)
			}
			text = collapsed
		} else {
			if wide == nil {
				wide = make([]rune, len(cpts))
				for i, r := range cpts {
					if r > 0x7F && cptFlags(r)&fWhitespace != 0 {
						r = 0x0B // ASCII-only \s, as std::wregex
					}
					wide[i] = r
				}
			}
			text = wide
		}
		var err error
		if offsets, err = regexSplit(st.re, text, offsets); err != nil {
			return nil, err
		}
	}
	return offsets, nil
}

func collapseText(cpts []rune) []rune {
	out := make([]rune, len(cpts))
	for i, r := range cpts {
		if r < 128 {
			out[i] = r
			continue
		}
		f := cptFlags(r)
		switch {
		case f&fWhitespace != 0:
			out[i] = 0x0B
		case f&fCategory == fNumber:
			out[i] = phNumber
		case f&fCategory == fLetter:
			out[i] = phLetter
		case f&fCategory == fPunct:
			out[i] = phPunct
		case f&fCategory == fMark:
			out[i] = phMark
		case f&fCategory == fSymbol:
			out[i] = phSymbol
		default:
			out[i] = phOther
		}
	}
	return out
}

// regexSplit splits each chunk at the regex's matches; text between matches
// stays as its own chunk (std::regex_iterator semantics in llama.cpp).
func regexSplit(re *regexp2.Regexp, text []rune, offsets []int) ([]int, error) {
	out := make([]int, 0, len(offsets))
	start := 0
	for _, n := range offsets {
		chunk := text[start : start+n]
		prev := 0
		m, err := re.FindRunesMatch(chunk)
		for err == nil && m != nil {
			if m.Index > prev {
				out = append(out, m.Index-prev)
			}
			if m.Length > 0 {
				out = append(out, m.Length)
			}
			prev = m.Index + m.Length
			m, err = re.FindNextMatch(m)
		}
		if err != nil {
			return nil, err
		}
		if prev < n {
			out = append(out, n-prev)
		}
		start += n
	}
	return out, nil
}

// cursor gives splitters bounded access to one chunk.
type cursor struct {
	cpts     []rune
	ini, end int
}

const outOfRange = -1

func (c *cursor) cpt(i int) rune {
	if i >= c.ini && i < c.end {
		return c.cpts[i]
	}
	return outOfRange
}

func (c *cursor) flags(i int) uint8 {
	if i >= c.ini && i < c.end {
		return cptFlags(c.cpts[i])
	}
	return 0
}

func lowerASCII(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// splitGPT2 is reGPT2 by hand (llama.cpp's unicode_regex_split_custom_gpt2).
func splitGPT2(cpts []rune, offsets []int) []int {
	return splitCustom(cpts, offsets, false)
}

// splitLlama3 is reLlama3 by hand.
func splitLlama3(cpts []rune, offsets []int) []int {
	return splitCustom(cpts, offsets, true)
}

func splitCustom(cpts []rune, offsets []int, llama3 bool) []int {
	out := make([]int, 0, len(offsets)*4)
	start := 0
	for _, n := range offsets {
		c := cursor{cpts: cpts, ini: start, end: start + n}
		start += n
		prevEnd := c.ini
		add := func(end int) int {
			l := end - prevEnd
			if l > 0 {
				out = append(out, l)
			}
			prevEnd = end
			return l
		}
		notWLN := func(f uint8) bool { return f&(fWhitespace|fLetter|fNumber) == 0 && f != 0 }
		for pos := c.ini; pos < c.end; {
			cpt := c.cpt(pos)
			flags := c.flags(pos)
			if cpt == '\'' && pos+1 < c.end {
				nx := c.cpt(pos + 1)
				if llama3 {
					nx = lowerASCII(nx)
				}
				if nx == 's' || nx == 't' || nx == 'm' || nx == 'd' {
					pos += add(pos + 2)
					continue
				}
				if pos+2 < c.end {
					nn := c.cpt(pos + 2)
					if llama3 {
						nn = lowerASCII(nn)
					}
					if (nx == 'r' && nn == 'e') || (nx == 'v' && nn == 'e') || (nx == 'l' && nn == 'l') {
						pos += add(pos + 3)
						continue
					}
				}
			}
			if llama3 {
				// [^\r\n\p{L}\p{N}]?\p{L}+
				if !(cpt == '\r' || cpt == '\n' || flags&fNumber != 0) {
					if flags&fLetter != 0 || c.flags(pos+1)&fLetter != 0 {
						pos++
						for c.flags(pos)&fLetter != 0 {
							pos++
						}
						add(pos)
						continue
					}
				}
				// \p{N}{1,3}
				if flags&fNumber != 0 {
					ini := pos
					for c.flags(pos)&fNumber != 0 {
						pos++
						if pos-ini >= 3 {
							add(pos)
							ini = pos
						}
					}
					add(pos)
					continue
				}
				// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
				f2 := flags
				if cpt == ' ' {
					f2 = c.flags(pos + 1)
				}
				if f2&(fWhitespace|fLetter|fNumber) == 0 && flags != 0 {
					if cpt == ' ' {
						pos++
					}
					for notWLN(f2) {
						pos++
						f2 = c.flags(pos)
					}
					for r := c.cpt(pos); r == '\r' || r == '\n'; r = c.cpt(pos) {
						pos++
					}
					add(pos)
					continue
				}
			} else {
				f2 := flags
				if cpt == ' ' {
					f2 = c.flags(pos + 1)
				}
				if f2&fLetter != 0 || f2&fNumber != 0 || notWLN(f2) {
					if cpt == ' ' {
						pos++
					}
					var cls func(uint8) bool
					switch {
					case f2&fLetter != 0:
						cls = func(f uint8) bool { return f&fLetter != 0 }
					case f2&fNumber != 0:
						cls = func(f uint8) bool { return f&fNumber != 0 }
					default:
						cls = notWLN
					}
					for cls(f2) {
						pos++
						f2 = c.flags(pos)
					}
					add(pos)
					continue
				}
			}
			nws := 0
			lastRN := 0
			for c.flags(pos+nws)&fWhitespace != 0 {
				if r := c.cpt(pos + nws); llama3 && (r == '\r' || r == '\n') {
					lastRN = pos + nws + 1
				}
				nws++
			}
			if lastRN > 0 { // \s*[\r\n]+
				pos = lastRN
				add(pos)
				continue
			}
			if nws > 1 && c.cpt(pos+nws) != outOfRange { // \s+(?!\S)
				pos += nws - 1
				add(pos)
				continue
			}
			if nws > 0 { // \s+
				pos += nws
				add(pos)
				continue
			}
			pos++
			add(pos)
		}
	}
	return out
}
