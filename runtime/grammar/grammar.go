// Package grammar is constrained decoding: a context-free grammar over
// bytes (and special-token symbols), compiled from a JSON-schema subset or
// built directly (the tool-call syntaxes of runtime/toolcall), run as a
// pushdown automaton, and a token mask that says which tokens of a
// vocabulary keep the output a valid prefix.
//
// The automaton follows llama.cpp's GBNF engine: a state is a set of
// stacks of grammar positions, a position names one element of one
// alternative of one rule. Stacks are persistent linked lists, hash-consed
// so that equal stacks have equal ids; a state is therefore a small sorted
// set of ids, which makes it cheap to compare and to cache masks by.
package grammar

import (
	"errors"
	"fmt"
)

type elemKind uint8

const (
	eEnd     elemKind = iota // end of the rule's last alternative
	eAlt                     // end of an alternative, another follows
	eChars                   // one byte of a set: arg indexes Grammar.sets
	eRef                     // a rule: arg is its id
	eSpecial                 // one special token: arg is its id
)

type elem struct {
	kind elemKind
	arg  int32
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }
func (s *byteSet) add(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s[c>>6] |= 1 << (uint(c) & 63)
	}
}

// Grammar is a compiled grammar; it is read-only and safe to share.
type Grammar struct {
	elems    []elem
	alts     [][]int32 // per rule: the position of each alternative's first element
	sets     []byteSet
	root     int32
	specials []int32 // special token ids the grammar uses
}

// MaxElems bounds a grammar's size (what a schema can make us allocate).
const MaxElems = 1 << 20

// ErrTooLarge is returned for grammars over MaxElems elements.
var ErrTooLarge = errors.New("grammar: the schema expands to too large a grammar")

// seq is one alternative while building.
type seq []elem

// builder assembles rules.
type builder struct {
	rules  [][]seq
	sets   []byteSet
	setIdx map[byteSet]int32
	size   int
	err    error
	spec   map[int32]bool
}

func newBuilder() *builder {
	return &builder{setIdx: map[byteSet]int32{}, spec: map[int32]bool{}}
}

func (b *builder) newRule() int32 {
	b.rules = append(b.rules, nil)
	return int32(len(b.rules) - 1)
}

func (b *builder) define(r int32, alts ...seq) {
	for _, a := range alts {
		b.size += len(a) + 1
	}
	if b.size > MaxElems {
		b.err = ErrTooLarge
		return
	}
	b.rules[r] = alts
}

// rule makes a new rule of alts and returns a reference to it.
func (b *builder) rule(alts ...seq) elem {
	r := b.newRule()
	b.define(r, alts...)
	return elem{eRef, r}
}

func ref(r int32) elem { return elem{eRef, r} }

func (b *builder) set(s byteSet) elem {
	i, ok := b.setIdx[s]
	if !ok {
		i = int32(len(b.sets))
		b.sets = append(b.sets, s)
		b.setIdx[s] = i
	}
	return elem{eChars, i}
}

// chars is a byte set from lo,hi pairs.
func (b *builder) chars(ranges ...byte) elem {
	var s byteSet
	for i := 0; i+1 < len(ranges); i += 2 {
		s.add(ranges[i], ranges[i+1])
	}
	return b.set(s)
}

func (b *builder) lit(s string) seq {
	out := make(seq, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = b.chars(s[i], s[i])
	}
	return out
}

func (b *builder) special(id int32) elem {
	b.spec[id] = true
	return elem{eSpecial, id}
}

func (b *builder) opt(s seq) elem { return b.rule(s, seq{}) }

// star is s*; s must not match the empty string.
func (b *builder) star(s seq) elem {
	r := b.newRule()
	b.define(r, cat(s, seq{ref(r)}), seq{})
	return ref(r)
}

// repeat is s{min,max}; max < 0 is unbounded. s must not be nullable.
func (b *builder) repeat(s seq, lo, hi int) seq {
	if hi >= 0 && lo > hi {
		b.err = fmt.Errorf("grammar: repetition {%d,%d}", lo, hi)
		return nil
	}
	if lo*len(s) > MaxElems || hi > MaxElems {
		b.err = ErrTooLarge
		return nil
	}
	var out seq
	for i := 0; i < lo; i++ {
		out = append(out, s...)
	}
	if hi < 0 {
		return append(out, b.star(s))
	}
	// Nested optionals: (s (s (s)?)?)?, built inside out.
	var tail seq
	for i := lo; i < hi; i++ {
		tail = seq{b.opt(cat(s, tail))}
		if b.err != nil {
			return nil
		}
	}
	return append(out, tail...)
}

func cat(ss ...seq) seq {
	n := 0
	for _, s := range ss {
		n += len(s)
	}
	out := make(seq, 0, n)
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

// build lays the rules out flat with root as the start.
func (b *builder) build(root seq) (*Grammar, error) {
	r := b.newRule()
	b.define(r, root)
	if b.err != nil {
		return nil, b.err
	}
	g := &Grammar{alts: make([][]int32, len(b.rules)), sets: b.sets, root: r}
	for id, alts := range b.rules {
		if len(alts) == 0 {
			return nil, fmt.Errorf("grammar: rule %d has no alternatives", id)
		}
		for i, a := range alts {
			g.alts[id] = append(g.alts[id], int32(len(g.elems)))
			g.elems = append(g.elems, a...)
			if i == len(alts)-1 {
				g.elems = append(g.elems, elem{kind: eEnd})
			} else {
				g.elems = append(g.elems, elem{kind: eAlt})
			}
		}
	}
	for id := range b.spec {
		g.specials = append(g.specials, id)
	}
	return g, nil
}

func (g *Grammar) atEnd(p int32) bool { k := g.elems[p].kind; return k == eEnd || k == eAlt }
func (g *Grammar) terminal(p int32) bool {
	k := g.elems[p].kind
	return k == eChars || k == eSpecial
}
