package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

func (t *Tokenizer) encodeWPM(out []int32, text string, frags []fragment, addSpecial bool) []int32 {
	if addSpecial {
		out = append(out, t.bos)
	}
	for _, f := range frags {
		if f.tok != null {
			out = append(out, f.tok)
			continue
		}
		out = t.wpmText(out, text[f.start:f.end])
	}
	if addSpecial && t.sep >= 0 {
		out = append(out, t.sep)
	}
	return out
}

// nfdFirst is the first codepoint of r's canonical decomposition: with the
// combining marks dropped later, this strips accents the way llama.cpp does.
func nfdFirst(r rune) rune {
	lo, hi := 0, len(nfdRanges)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case r < nfdRanges[m][0]:
			hi = m
		case r > nfdRanges[m][1]:
			lo = m + 1
		default:
			return nfdRanges[m][2]
		}
	}
	return r
}

func isChineseChar(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) || (r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}

// wpmWords is BERT's basic tokenizer: normalize, split on whitespace, and
// make each punctuation mark and CJK character a word of its own.
func (t *Tokenizer) wpmWords(text string) []string {
	var words []string
	var cur []byte
	flush := func() {
		if len(cur) > 0 {
			words = append(words, string(cur))
			cur = cur[:0]
		}
	}
	for _, r := range decodeCpts(text, nil) {
		if t.stripAccents {
			r = nfdFirst(r)
		}
		f := cptFlags(r)
		if f&fWhitespace != 0 {
			flush()
			continue
		}
		if r == 0 || r == 0xFFFD || f&fCategory == fControl {
			continue
		}
		if t.stripAccents && f&fCategory == fMark {
			continue
		}
		if t.lowercase {
			r = unicode.ToLower(r)
		}
		if f&fCategory == fPunct || (r < 0x7F && f&fCategory == fSymbol) || isChineseChar(r) {
			flush()
			words = append(words, string(r))
			continue
		}
		cur = utf8.AppendRune(cur, r)
	}
	flush()
	return words
}

// wpmText greedily takes the longest vocab match from each position of
// "▁"+word; a word with any unmatched position becomes one unknown token.
func (t *Tokenizer) wpmText(out []int32, text string) []int32 {
	for _, word := range t.wpmWords(text) {
		w := "▁" + word
		mark := len(out)
		for i := 0; i < len(w); {
			j := min(len(w), i+t.maxTokLen)
			for ; j > i; j-- {
				if id, ok := t.toID[w[i:j]]; ok {
					out = append(out, id)
					break
				}
			}
			if j == i {
				out = out[:mark]
				break
			}
			i = j
		}
		if len(out) == mark {
			out = append(out, t.unk)
		}
	}
	return out
}
