package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// cpt flags mirror llama.cpp's unicode_cpt_flags: one general category plus
// whitespace. A codepoint with no flags (unassigned) matches none of the
// pre-tokenizer classes, which matters for the hand-written splitters.
const (
	fNumber uint8 = 1 << iota
	fLetter
	fSeparator
	fMark
	fPunct
	fSymbol
	fControl
	fWhitespace

	fCategory = fNumber | fLetter | fSeparator | fMark | fPunct | fSymbol | fControl
)

// flagTable covers the BMP; higher planes are computed on demand.
var flagTable = func() []uint8 {
	t := make([]uint8, 0x10000)
	for r := range t {
		t[r] = computeFlags(rune(r))
	}
	return t
}()

func computeFlags(r rune) uint8 {
	var f uint8
	switch {
	case unicode.IsLetter(r):
		f = fLetter
	case unicode.IsNumber(r):
		f = fNumber
	case unicode.IsMark(r):
		f = fMark
	case unicode.IsPunct(r):
		f = fPunct
	case unicode.IsSymbol(r):
		f = fSymbol
	case unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp):
		f = fSeparator
	case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs):
		f = fControl
	}
	if isSpace(r) {
		f |= fWhitespace
	}
	return f
}

// isSpace is llama.cpp's whitespace set (Python's str.isspace minus the
// ASCII information separators).
func isSpace(r rune) bool {
	switch {
	case r >= 0x09 && r <= 0x0D, r == 0x20, r == 0x85, r == 0xA0, r == 0x1680,
		r >= 0x2000 && r <= 0x200A, r == 0x2028, r == 0x2029, r == 0x202F, r == 0x205F, r == 0x3000:
		return true
	}
	return false
}

func cptFlags(r rune) uint8 {
	if r >= 0 && r < 0x10000 {
		return flagTable[r]
	}
	if r < 0 || r > unicode.MaxRune {
		return 0
	}
	return computeFlags(r)
}

// decodeCpts splits s into codepoints; each invalid byte becomes U+FFFD, as
// llama.cpp's unicode_cpts_from_utf8 does.
func decodeCpts(s string, buf []rune) []rune {
	buf = buf[:0]
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			buf = append(buf, rune(c))
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		buf = append(buf, r)
		i += n
	}
	return buf
}

// utf8Len is the sequence length announced by a lead byte (llama.cpp's
// unicode_len_utf8); continuation bytes count as 1.
func utf8Len(c byte) int {
	switch c >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}
