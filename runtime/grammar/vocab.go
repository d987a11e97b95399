package grammar

import (
	"bytes"
	"fmt"
	"math"
	mbits "math/bits"
	"slices"
)

// TokenSource is what a vocabulary gives the mask (runtime/tokenizer's
// Tokenizer implements it).
type TokenSource interface {
	VocabSize() int
	Piece(id int32) []byte // decoded bytes; empty for control tokens
	IsEOG(id int32) bool
	Token(id int32) string // the token's text as written in the vocabulary
}

// Vocab is a vocabulary prepared for masking: a trie over every token's
// decoded bytes, so that one walk shares the work of all tokens with a
// common prefix and prunes a subtree as soon as its prefix fails. Build
// one per model; it is read-only and safe to share.
type Vocab struct {
	src     TokenSource
	n       int
	nodes   []trieNode
	edges   []trieEdge
	toks    []int32
	eog     []bool
	eogIDs  []int32
	special map[string]int32 // tokens with no bytes (control), by their text
}

type trieNode struct{ e0, e1, t0, t1 int32 }
type trieEdge struct {
	b  byte
	to int32
}

// NewVocab builds the trie of src.
func NewVocab(src TokenSource) *Vocab {
	n := src.VocabSize()
	v := &Vocab{src: src, n: n, eog: make([]bool, n), special: map[string]int32{}}
	ids := make([]int32, 0, n)
	for id := int32(0); int(id) < n; id++ {
		if src.IsEOG(id) {
			v.eog[id] = true
			v.eogIDs = append(v.eogIDs, id)
			continue
		}
		if len(src.Piece(id)) == 0 {
			if t := src.Token(id); t != "" {
				if _, dup := v.special[t]; !dup {
					v.special[t] = id
				}
			}
			continue
		}
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b int32) int { return bytes.Compare(src.Piece(a), src.Piece(b)) })
	v.toks = make([]int32, 0, len(ids))
	v.nodes = append(v.nodes, trieNode{})
	v.fill(0, ids, 0)
	return v
}

// fill makes node hold ids (sorted, sharing their first depth bytes).
func (v *Vocab) fill(node int32, ids []int32, depth int) {
	i := 0
	t0 := int32(len(v.toks))
	for i < len(ids) && len(v.src.Piece(ids[i])) == depth {
		v.toks = append(v.toks, ids[i])
		i++
	}
	v.nodes[node].t0, v.nodes[node].t1 = t0, int32(len(v.toks))
	type group struct {
		b      byte
		lo, hi int
	}
	var groups []group
	for i < len(ids) {
		b := v.src.Piece(ids[i])[depth]
		j := i
		for j < len(ids) && v.src.Piece(ids[j])[depth] == b {
			j++
		}
		groups = append(groups, group{b, i, j})
		i = j
	}
	e0 := int32(len(v.edges))
	for _, g := range groups {
		v.nodes = append(v.nodes, trieNode{})
		v.edges = append(v.edges, trieEdge{g.b, int32(len(v.nodes) - 1)})
	}
	v.nodes[node].e0, v.nodes[node].e1 = e0, int32(len(v.edges))
	for k, g := range groups {
		v.fill(v.edges[int(e0)+k].to, ids[g.lo:g.hi], depth+1)
	}
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return v.n }

// SpecialID is the id of a control token written text, if the vocabulary
// has one (tool-call markers such as [TOOL_CALLS] or <|python_tag|>).
func (v *Vocab) SpecialID(text string) (int32, bool) {
	id, ok := v.special[text]
	return id, ok
}

// Constraint applies a grammar to generation one token at a time: Mask
// removes the tokens that cannot continue it, Accept records the chosen
// one. It satisfies runtime/generate's Constraint.
type Constraint struct {
	v       *Vocab
	m       *Matcher
	ended   bool
	bufs    [][]int32
	cache   []cacheEntry
	slot    map[uint64]int32
	next    int
	scratch []int32
	sets    [][]int32 // interned walk states
	sidx    map[uint64]int32
	trans   [][256]int32
}

type cacheEntry struct {
	hash uint64
	ids  []int32
	bits []uint64
}

// maskCache is how many states' masks a Constraint keeps (each is
// vocab/8 bytes).
const maskCache = 32

// NewConstraint starts g over vocabulary v.
func NewConstraint(g *Grammar, v *Vocab) *Constraint {
	return &Constraint{v: v, m: NewMatcher(g), slot: map[uint64]int32{}, sidx: map[uint64]int32{}}
}

// Matcher is the underlying matcher (its state is the text accepted so far).
func (c *Constraint) Matcher() *Matcher { return c.m }

func hashIDs(ids []int32) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range ids {
		h ^= uint64(uint32(x))
		h *= 1099511628211
	}
	return h
}

// Allowed returns the bitset (bit i: token i may come next) for the
// current state. It belongs to the Constraint until the next call.
func (c *Constraint) Allowed() []uint64 {
	h := hashIDs(c.m.cur)
	if i, ok := c.slot[h]; ok && slices.Equal(c.cache[i].ids, c.m.cur) {
		return c.cache[i].bits
	}
	idx := c.next
	if len(c.cache) < maskCache {
		c.cache = append(c.cache, cacheEntry{bits: make([]uint64, (c.v.n+63)/64)})
		idx = len(c.cache) - 1
	} else {
		delete(c.slot, c.cache[idx].hash)
		c.next = (c.next + 1) % maskCache
	}
	e := &c.cache[idx]
	e.hash = h
	e.ids = append(e.ids[:0], c.m.cur...)
	c.slot[h] = int32(idx)
	bits := e.bits
	clear(bits)
	if sid := c.state(c.m.cur); sid >= 0 {
		c.walk(0, sid, 0, bits)
	} else {
		c.walkSlow(0, c.m.cur, 0, bits)
	}
	for _, id := range c.m.g.specials {
		if int(id) >= c.v.n {
			continue
		}
		c.scratch = c.m.advanceSpecial(c.m.cur, id, c.scratch[:0])
		if len(c.scratch) > 0 {
			bits[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	if c.m.Accepting() {
		for _, id := range c.v.eogIDs {
			bits[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	return bits
}

// States of the walk are interned so that a transition, once computed,
// is two array reads: the same few states recur all over the trie (inside
// a string, every character leads to the same state).
const (
	unknown     int32 = -2
	dead        int32 = -1
	maxStates         = 1 << 12 // 4k states x 1 KiB of transitions
	notInterned int32 = -3
)

// state returns the id of set ids, interning it; notInterned when the
// table is full or the hash collides.
func (c *Constraint) state(ids []int32) int32 {
	h := hashIDs(ids)
	if sid, ok := c.sidx[h]; ok {
		if slices.Equal(c.sets[sid], ids) {
			return sid
		}
		return notInterned
	}
	if len(c.sets) >= maxStates {
		return notInterned
	}
	sid := int32(len(c.sets))
	c.sets = append(c.sets, append([]int32(nil), ids...))
	var row [256]int32
	for i := range row {
		row[i] = unknown
	}
	c.trans = append(c.trans, row)
	c.sidx[h] = sid
	return sid
}

// walk marks every token below trie node whose bytes continue state sid.
func (c *Constraint) walk(node, sid int32, depth int, bits []uint64) {
	if depth == len(c.bufs) {
		c.bufs = append(c.bufs, nil)
	}
	v := c.v
	n := v.nodes[node]
	for e := n.e0; e < n.e1; e++ {
		ed := v.edges[e]
		nsid := c.trans[sid][ed.b]
		if nsid == unknown {
			next := c.m.advanceByte(c.sets[sid], ed.b, c.bufs[depth][:0])
			c.bufs[depth] = next
			switch {
			case len(next) == 0:
				nsid = dead
			default:
				nsid = c.state(next)
			}
			if nsid == notInterned {
				c.mark(ed.to, bits)
				if v.nodes[ed.to].e1 > v.nodes[ed.to].e0 {
					c.walkSlow(ed.to, next, depth+1, bits)
				}
				continue
			}
			c.trans[sid][ed.b] = nsid
		}
		if nsid == dead {
			continue
		}
		c.mark(ed.to, bits)
		if v.nodes[ed.to].e1 > v.nodes[ed.to].e0 {
			c.walk(ed.to, nsid, depth+1, bits)
		}
	}
}

func (c *Constraint) mark(node int32, bits []uint64) {
	ch := c.v.nodes[node]
	for _, id := range c.v.toks[ch.t0:ch.t1] {
		bits[id>>6] |= 1 << (uint(id) & 63)
	}
}

// walkSlow is walk without interned states (the table is full).
func (c *Constraint) walkSlow(node int32, state []int32, depth int, bits []uint64) {
	if depth == len(c.bufs) {
		c.bufs = append(c.bufs, nil)
	}
	v := c.v
	n := v.nodes[node]
	for e := n.e0; e < n.e1; e++ {
		ed := v.edges[e]
		next := c.m.advanceByte(state, ed.b, c.bufs[depth][:0])
		c.bufs[depth] = next
		if len(next) == 0 {
			continue
		}
		c.mark(ed.to, bits)
		if v.nodes[ed.to].e1 > v.nodes[ed.to].e0 {
			c.walkSlow(ed.to, next, depth+1, bits)
		}
	}
}

// Mask sets the logits of tokens that cannot come next to -Inf. logits
// may be longer than the vocabulary (padded outputs); the extra entries
// are masked too.
func (c *Constraint) Mask(logits []float32) error {
	if c.m.err != nil {
		return c.m.err
	}
	bits := c.Allowed()
	if c.m.err != nil {
		return c.m.err
	}
	ninf := float32(math.Inf(-1))
	some := false
	n := min(len(logits), c.v.n)
	// Word at a time: a state that allows most tokens costs little.
	for w := 0; w*64 < n; w++ {
		x := bits[w]
		if x != 0 {
			some = true
		}
		x = ^x
		for x != 0 {
			i := w*64 + mbits.TrailingZeros64(x)
			if i >= n {
				break
			}
			logits[i] = ninf
			x &= x - 1
		}
	}
	for i := n; i < len(logits); i++ {
		logits[i] = ninf
	}
	if !some {
		return fmt.Errorf("grammar: no token of the vocabulary can continue the output")
	}
	return nil
}

// Accept records token tok.
func (c *Constraint) Accept(tok int32) error {
	if tok < 0 || int(tok) >= c.v.n {
		return fmt.Errorf("grammar: token %d outside the vocabulary", tok)
	}
	if c.v.eog[tok] {
		if !c.m.Accepting() {
			return fmt.Errorf("%w: end of generation before the output is complete", ErrNoMatch)
		}
		c.ended = true
		return nil
	}
	if p := c.v.src.Piece(tok); len(p) > 0 {
		return c.m.Feed(p)
	}
	return c.m.FeedSpecial(tok)
}

// Done reports that the output is complete and nothing may follow.
func (c *Constraint) Done() bool { return c.ended || c.m.Done() }

// Accepting reports that the output so far is complete (more may follow).
func (c *Constraint) Accepting() bool { return c.m.Accepting() }
