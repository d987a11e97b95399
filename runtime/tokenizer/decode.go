package tokenizer

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// buildPieces precomputes every token's decoded bytes (llama_token_to_piece
// with special=false): control and unknown tokens give nothing.
func (t *Tokenizer) buildPieces() {
	t.pieces = make([][]byte, len(t.tokens))
	for id, s := range t.tokens {
		a := t.attrs[id]
		var p []byte
		switch {
		case a&(attrControl|attrUnknown) != 0:
		case a&attrUser != 0:
			p = []byte(s)
		case a&attrNormal != 0:
			if t.kind == kindBPE {
				p = decodeByteLevel(s)
			} else {
				p = []byte(strings.ReplaceAll(s, "▁", " "))
			}
		case a&attrByte != 0:
			if len(s) == 6 && strings.HasPrefix(s, "<0x") {
				if v, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
					p = []byte{byte(v)}
				}
			}
		}
		t.pieces[id] = p
	}
}

// decodeByteLevel undoes the GPT-2 byte-to-unicode mapping. A character
// outside the table (rare, hand-added tokens) is kept as its UTF-8.
func decodeByteLevel(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// Piece is the bytes id contributes to decoded text. The slice is shared:
// do not modify it. Out-of-range ids give nil.
func (t *Tokenizer) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(t.pieces) {
		return nil
	}
	return t.pieces[id]
}

// Decode joins the pieces of ids. With a space-prefix vocab (SPM) the space
// Encode put in front of the text is removed from the first piece that has
// any bytes, also when BOS or other control tokens come first, so that
// Decode(Encode(s, true, false)) == s. Unlike llama_detokenize no
// clean-up of spaces before punctuation is done: decoding stays lossless.
func (t *Tokenizer) Decode(ids []int32) string {
	n := 0
	for _, id := range ids {
		n += len(t.Piece(id))
	}
	b := make([]byte, 0, n)
	strip := t.addSpacePrefix
	for _, id := range ids {
		p := t.Piece(id)
		if len(p) == 0 {
			continue
		}
		if strip {
			strip = false
			if p[0] == ' ' {
				p = p[1:]
			}
		}
		b = append(b, p...)
	}
	return string(b)
}
