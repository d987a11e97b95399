package grammar

import (
	"errors"
	"fmt"
	"slices"
)

// accept is the id of the empty stack: the grammar has matched completely.
const accept int32 = -1

type node struct {
	pos    int32 // top of the stack: a terminal element or a return position
	parent int32 // the rest of the stack; accept at the bottom
}

// maxNodes bounds the stacks one matcher may intern (deep nesting).
const maxNodes = 1 << 20

// maxExpand bounds the expansion of one position (nullable chains).
const maxExpand = 256

// ErrNoMatch is returned when a byte or token cannot continue the grammar.
var ErrNoMatch = errors.New("grammar: the text does not continue the grammar")

// Matcher runs a grammar over bytes and special tokens. One per
// generation; not safe for concurrent use.
type Matcher struct {
	g      *Grammar
	nodes  []node
	index  map[uint64]int32
	cur    []int32 // the state: sorted, distinct stack ids
	s1, s2 []int32 // spare state buffers
	err    error
}

// NewMatcher starts g at its beginning.
func NewMatcher(g *Grammar) *Matcher {
	m := &Matcher{g: g, index: map[uint64]int32{}}
	m.cur = m.expandAlts(g.root, accept, nil, 0)
	m.cur = canon(m.cur)
	return m
}

// expandAlts pushes every alternative of rule r over parent.
func (m *Matcher) expandAlts(r, parent int32, out []int32, depth int) []int32 {
	for _, a := range m.g.alts[r] {
		if m.g.atEnd(a) {
			out = m.cont(parent, out, depth+1)
		} else {
			out = m.expand(a, parent, out, depth+1)
		}
	}
	return out
}

func (m *Matcher) intern(pos, parent int32) int32 {
	k := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if id, ok := m.index[k]; ok {
		return id
	}
	if len(m.nodes) >= maxNodes {
		m.err = errors.New("grammar: nesting too deep")
		return accept
	}
	id := int32(len(m.nodes))
	m.nodes = append(m.nodes, node{pos, parent})
	m.index[k] = id
	return id
}

// expand adds the terminal-topped stacks that position pos (inside an
// alternative) over parent stands for.
func (m *Matcher) expand(pos, parent int32, out []int32, depth int) []int32 {
	if depth > maxExpand {
		m.err = errors.New("grammar: expansion too deep (a nullable loop)")
		return out
	}
	e := m.g.elems[pos]
	if e.kind != eRef {
		return append(out, m.intern(pos, parent))
	}
	ret := pos + 1
	np := parent
	if !m.g.atEnd(ret) {
		np = m.intern(ret, parent)
	}
	return m.expandAlts(e.arg, np, out, depth)
}

// cont adds what follows when the rule under stack id has finished.
func (m *Matcher) cont(id int32, out []int32, depth int) []int32 {
	if id == accept {
		return append(out, accept)
	}
	n := m.nodes[id]
	if m.g.terminal(n.pos) {
		return append(out, id)
	}
	return m.expand(n.pos, n.parent, out, depth)
}

// step moves stack id (topped by a terminal that matched) forward.
func (m *Matcher) step(id int32, out []int32) []int32 {
	n := m.nodes[id]
	next := n.pos + 1
	if m.g.atEnd(next) {
		return m.cont(n.parent, out, 0)
	}
	return m.expand(next, n.parent, out, 0)
}

// advanceByte is the state after byte c from state in, appended to out
// (sorted, distinct).
func (m *Matcher) advanceByte(in []int32, c byte, out []int32) []int32 {
	start := len(out)
	for _, id := range in {
		if id == accept {
			continue
		}
		e := m.g.elems[m.nodes[id].pos]
		if e.kind == eChars && m.g.sets[e.arg].has(c) {
			out = m.step(id, out)
		}
	}
	return append(out[:start], canon(out[start:])...)
}

func (m *Matcher) advanceSpecial(in []int32, tok int32, out []int32) []int32 {
	start := len(out)
	for _, id := range in {
		if id == accept {
			continue
		}
		e := m.g.elems[m.nodes[id].pos]
		if e.kind == eSpecial && e.arg == tok {
			out = m.step(id, out)
		}
	}
	return append(out[:start], canon(out[start:])...)
}

// canon sorts and dedupes in place.
func canon(s []int32) []int32 {
	if len(s) < 2 {
		return s
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// Feed advances over text; on error the state is unchanged.
func (m *Matcher) Feed(text []byte) error {
	if m.err != nil {
		return m.err
	}
	if len(text) == 0 {
		return nil
	}
	a, b := m.s1[:0], m.s2[:0]
	src := m.cur
	for i, c := range text {
		a = m.advanceByte(src, c, a[:0])
		if m.err != nil || len(a) == 0 {
			m.s1, m.s2 = a, b
			if m.err != nil {
				return m.err
			}
			return fmt.Errorf("%w: byte %d (%q) of %q", ErrNoMatch, i, c, text)
		}
		src = a
		a, b = b, a
	}
	m.s1, m.s2 = m.cur, a
	m.cur = src
	return nil
}

// FeedSpecial advances over a special token.
func (m *Matcher) FeedSpecial(tok int32) error {
	if m.err != nil {
		return m.err
	}
	next := m.advanceSpecial(m.cur, tok, m.s1[:0])
	if len(next) == 0 {
		m.s1 = next
		return fmt.Errorf("%w: special token %d", ErrNoMatch, tok)
	}
	m.s1, m.cur = m.cur, next
	return nil
}

// Accepting reports whether the text so far is a complete match.
func (m *Matcher) Accepting() bool { return len(m.cur) > 0 && m.cur[0] == accept }

// Done reports whether the match is complete and nothing can follow.
func (m *Matcher) Done() bool { return len(m.cur) == 1 && m.cur[0] == accept }

// Match reports whether text matches g completely.
func (g *Grammar) Match(text []byte) bool {
	m := NewMatcher(g)
	return m.Feed(text) == nil && m.Accepting()
}
