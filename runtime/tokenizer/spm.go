package tokenizer

import (
	"fmt"
	"strings"
)

// symbol is one node of the linked list a word is merged in.
type symbol struct {
	prev, next int
	start, n   int // byte span in the word; n == 0 once merged away
}

type spmBigram struct {
	left, right int
	score       float32
	size        int
}

// spmBefore pops the highest score, then the leftmost pair.
func spmBefore(a, b *spmBigram) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

func (t *Tokenizer) encodeSPM(out []int32, text string, frags []fragment, addSpecial bool) ([]int32, error) {
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	prevSpecial := true // a space prefix goes on the first text and after each special token
	var sb strings.Builder
	var syms []symbol
	q := &mergeQueue[spmBigram]{before: spmBefore}
	var err error
	for _, f := range frags {
		if f.tok != null {
			out = append(out, f.tok)
			prevSpecial = true
			continue
		}
		sb.Reset()
		if t.addSpacePrefix && prevSpecial {
			sb.WriteString("▁")
		}
		sb.WriteString(strings.ReplaceAll(text[f.start:f.end], " ", "▁"))
		if out, syms, err = t.spmWord(out, sb.String(), syms, q); err != nil {
			return nil, err
		}
		prevSpecial = false
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out, nil
}

// spmWord merges the highest-scoring adjacent pair that is a token until no
// pair is, then emits tokens, falling back to byte tokens.
func (t *Tokenizer) spmWord(out []int32, w string, syms []symbol, q *mergeQueue[spmBigram]) ([]int32, []symbol, error) {
	syms = syms[:0]
	for off := 0; off < len(w); {
		n := min(utf8Len(w[off]), len(w)-off)
		syms = append(syms, symbol{prev: len(syms) - 1, next: len(syms) + 1, start: off, n: n})
		off += n
	}
	if len(syms) == 0 {
		return out, syms, nil
	}
	syms[len(syms)-1].next = -1
	q.reset()
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := w[syms[l].start : syms[r].start+syms[r].n]
		id, ok := t.toID[s]
		if !ok {
			return
		}
		q.push(spmBigram{left: l, right: r, score: t.scores[id], size: len(s)})
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := 0; i != -1; i = syms[i].next {
		s := w[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.toID[s]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			id := t.byteTok[s[j]]
			if id < 0 {
				return nil, syms, fmt.Errorf("tokenizer: no token for byte 0x%02X", s[j])
			}
			out = append(out, id)
		}
	}
	return out, syms, nil
}
