package tokenizer

import "unicode/utf8"

// Stream detokenizes one id at a time. Concatenating every Add result and
// the final Flush gives exactly Decode of all ids; a UTF-8 sequence split
// across tokens (byte-fallback emoji) is held back until it is complete.
type Stream struct {
	t     *Tokenizer
	buf   []byte
	strip bool
}

// NewStream starts a streaming detokenizer.
func (t *Tokenizer) NewStream() *Stream {
	return &Stream{t: t, strip: t.addSpacePrefix}
}

// NewContinuation starts a streaming detokenizer for tokens that continue
// text already shown (a generation after its prompt): the first piece keeps
// its leading space, which only the start of a text drops.
func (t *Tokenizer) NewContinuation() *Stream { return &Stream{t: t} }

// Add appends id and returns the text that is now complete.
func (s *Stream) Add(id int32) string {
	p := s.t.Piece(id)
	if len(p) == 0 {
		return ""
	}
	if s.strip {
		s.strip = false
		if p[0] == ' ' {
			p = p[1:]
		}
	}
	s.buf = append(s.buf, p...)
	n := completePrefix(s.buf)
	if n == 0 {
		return ""
	}
	out := string(s.buf[:n])
	s.buf = append(s.buf[:0], s.buf[n:]...)
	return out
}

// Flush returns whatever is held back (possibly an incomplete sequence).
func (s *Stream) Flush() string {
	out := string(s.buf)
	s.buf = s.buf[:0]
	return out
}

// completePrefix is len(b) minus a trailing incomplete but still valid
// UTF-8 prefix. Invalid bytes are not held: they can never complete.
func completePrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
