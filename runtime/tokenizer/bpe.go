package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for
// themselves, the rest map to U+0100 onwards, so every byte is one visible
// character in the vocabulary.
var (
	byteToRune [256]rune
	byteToStr  [256]string
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		byteToStr[b] = string(byteToRune[b])
		runeToByte[byteToRune[b]] = byte(b)
	}
}

type bpeBigram struct {
	left, right int
	rank        int32
	text        string
}

// bpeBefore pops the lowest rank, then the leftmost pair.
func bpeBefore(a, b *bpeBigram) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.left < b.left
}

func (t *Tokenizer) encodeBPE(out []int32, text string, frags []fragment, addSpecial bool) ([]int32, error) {
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	var cpts []rune
	var enc []byte
	var syms []symbol
	q := &mergeQueue[bpeBigram]{before: bpeBefore}
	for _, f := range frags {
		if f.tok != null {
			out = append(out, f.tok)
			continue
		}
		cpts = decodeCpts(text[f.start:f.end], cpts)
		words, err := t.pre.split(cpts)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: pre-tokenize: %w", err)
		}
		pos := 0
		for _, n := range words {
			enc = enc[:0]
			for _, r := range cpts[pos : pos+n] {
				var b [4]byte
				for _, c := range b[:utf8.EncodeRune(b[:], r)] {
					enc = append(enc, byteToStr[c]...)
				}
			}
			pos += n
			out, syms = t.bpeWord(out, string(enc), syms, q)
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out, nil
}

// bpeWord applies merges by rank to one byte-encoded word.
func (t *Tokenizer) bpeWord(out []int32, w string, syms []symbol, q *mergeQueue[bpeBigram]) ([]int32, []symbol) {
	if t.ignoreMerges {
		if id, ok := t.toID[w]; ok {
			return append(out, id), syms
		}
	}
	syms = syms[:0]
	for off := 0; off < len(w); {
		n := min(utf8Len(w[off]), len(w)-off)
		syms = append(syms, symbol{prev: len(syms) - 1, next: len(syms) + 1, start: off, n: n})
		off += n
	}
	if len(syms) == 0 {
		return out, syms
	}
	syms[len(syms)-1].next = -1
	q.reset()
	str := func(i int) string { return w[syms[i].start : syms[i].start+syms[i].n] }
	add := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		rank, ok := t.ranks[[2]string{str(l), str(r)}]
		if !ok {
			return
		}
		q.push(bpeBigram{left: l, right: r, rank: rank, text: w[syms[l].start : syms[r].start+syms[r].n]})
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for q.Len() > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.next != b.right || l.n+r.n != len(b.text) {
			continue // outdated
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		add(l.prev, b.left)
		add(b.left, l.next)
	}
	for i := 0; i != -1; i = syms[i].next {
		s := str(i)
		if id, ok := t.toID[s]; ok {
			out = append(out, id)
			continue
		}
		// llama.cpp looks up each raw byte of the symbol; rarely a token.
		for j := 0; j < len(s); j++ {
			if id, ok := t.toID[s[j:j+1]]; ok {
				out = append(out, id)
			}
		}
	}
	return out, syms
}

// buildBytes maps each byte to its fallback token.
func (t *Tokenizer) buildBytes() {
	for b := 0; b < 256; b++ {
		id := null
		switch t.kind {
		case kindSPM:
			if v, ok := t.toID[fmt.Sprintf("<0x%02X>", b)]; ok {
				id = v
			} else if v, ok := t.toID[string([]byte{byte(b)})]; ok {
				id = v
			} else if t.unk >= 0 {
				id = t.unk
			}
		default:
			if v, ok := t.toID[byteToStr[b]]; ok {
				id = v
			}
		}
		t.byteTok[b] = id
	}
}
