package toolcall

import (
	"encoding/json"
	"strings"
)

// EventKind says what an Event carries.
type EventKind uint8

const (
	// Text is content outside any call.
	Text EventKind = iota
	// Start opens call Index: ID and Name are set.
	Start
	// Args is the next piece of call Index's arguments (JSON text; the
	// pieces of one call concatenate to its Arguments).
	Args
)

// Event is one step of the parse.
type Event struct {
	Kind  EventKind
	Index int
	ID    string
	Name  string
	Text  string
}

// maxCall bounds the text one call may hold before the parser gives up
// on it (and shows it as text).
const maxCall = 1 << 20

type mode uint8

const (
	mText mode = iota
	mBody      // JSON call objects (kJSON), or the arguments of kNameArgs
	mName      // kNameArgs: the name before sep
	mXMLHead
	mXML
	mEnd // expecting End after a body
	mGLMHead
	mGLM
	mPyHead
	mPy      // Python calls, read whole at End (or at Close)
	mHarText // harmony: the body of a text message (mText reads a header)
	mFnName  // functionary: the recipient after >>>
	mFence   // Command R: an optional ```json line before the body
)

// Parser turns generated text into content and calls as it arrives. Feed
// it the text of every token (control tokens that are format markers as
// their text), then Close.
type Parser struct {
	f       *Format
	types   map[string]map[string]string // tool -> parameter -> JSON type, for XML values
	names   map[string]bool              // the tools' names: a bare object naming another is content
	buf     string
	mode    mode
	started bool // non-space content was seen (a bare call can only open the output)
	heldWS  string
	events  []Event
	calls   []Call
	content strings.Builder
	sc      scanner
	cur     *pending
	pos     int    // scanned up to here in buf
	xmlArgs int    // parameters written in the current XML call
	xmlFns  int    // functions read in the current XML section
	opener  string // the marker that opened the current call ("" for a bare one)
	badName bool   // a bare object named no tool
	paraSep bool   // a message ended (harmony, para): the next text opens a paragraph
}

// pending is the call being read.
type pending struct {
	index                int
	id, name             string
	started              bool
	args                 strings.Builder
	argsStart, argsSent  int // offsets in buf of the streamed arguments value
	streaming, argsIsStr bool
	argsDone             bool
}

// NewParser starts a parse; tools gives XML formats the parameter types.
func (f *Format) NewParser(tools []Tool) *Parser {
	p := &Parser{f: f, types: map[string]map[string]string{}, names: map[string]bool{}}
	if f.kind == kFunctionary {
		p.mode = mFnName // the prompt ends with >>>
	}
	for _, t := range tools {
		p.names[t.Name] = true
		var s struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(t.Parameters, &s) == nil {
			m := map[string]string{}
			for k, v := range s.Properties {
				if ts, ok := v.Type.(string); ok {
					m[k] = ts
				}
			}
			p.types[t.Name] = m
		}
	}
	return p
}

// Calls are the calls parsed so far (complete ones, and after Close the
// last even if cut short).
func (p *Parser) Calls() []Call { return p.calls }

// Content is all the text outside calls (after Close: without trailing
// white space when there were calls).
func (p *Parser) Content() string { return p.content.String() }

func isWS(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

func (p *Parser) text(t string) {
	if t == "" {
		return
	}
	t = p.heldWS + t
	end := len(t)
	for end > 0 && isWS(t[end-1]) {
		end--
	}
	p.heldWS = t[end:]
	if end > 0 {
		p.started = true
		p.content.WriteString(t[:end])
		p.events = append(p.events, Event{Kind: Text, Text: t[:end]})
	}
}

// paraText is content; the first text of a new message (paraSep) opens a
// paragraph: a blank line, not the previous message's trailing space.
func (p *Parser) paraText(s string) {
	if s == "" {
		return
	}
	if p.paraSep {
		p.heldWS, p.paraSep = "\n\n", false
	}
	p.text(s)
}

// Feed adds generated text and returns what it completes. The events
// slice is reused by the next call.
func (p *Parser) Feed(s string) []Event {
	p.events = p.events[:0]
	p.buf += s
	for p.step() {
	}
	return p.events
}

// Close ends the parse at the end of generation.
func (p *Parser) Close() []Event {
	p.events = p.events[:0]
	for p.step() {
	}
	switch p.mode {
	case mText:
		if p.f.kind != kHarmony || !looksHead(p.buf, true) { // an unfinished harmony header is dropped
			p.paraText(p.buf)
		}
	case mHarText:
		p.paraText(p.buf)
	case mEnd:
	case mPy:
		p.pyCalls(p.buf, "")
	default:
		if p.cur != nil && p.cur.name != "" {
			p.finish() // cut short (max_tokens): keep what was generated
		} else if p.cur == nil {
			p.paraText(p.opener + p.buf)
		}
	}
	p.buf = ""
	if len(p.calls) == 0 && p.heldWS != "" {
		p.content.WriteString(p.heldWS)
		p.events = append(p.events, Event{Kind: Text, Text: p.heldWS})
	}
	p.heldWS = ""
	return p.events
}

// markers that open something in text mode.
func (p *Parser) openers() []string { return append([]string{p.f.Begin}, p.f.ignore...) }

// step makes progress on buf; false when it needs more text.
func (p *Parser) step() bool {
	switch p.mode {
	case mText:
		if p.f.kind == kHarmony {
			return p.stepHarmonyHead()
		}
		return p.stepText()
	case mHarText:
		return p.stepHarmonyText()
	case mFnName:
		return p.stepFnName()
	case mFence:
		t := strings.TrimLeft(p.buf, " \n\t\r")
		switch {
		case t == "" || len(t) < 3 && strings.HasPrefix("```", t):
			return false
		case strings.HasPrefix(t, "```"): // ```json, then the list on the next line or the same
			i := strings.IndexAny(t[3:], "\n[")
			if i < 0 || i > 32 {
				if len(t) > 32+3 {
					return p.openerText()
				}
				return false
			}
			if i += 3; t[i] == '\n' {
				i++
			}
			p.buf = t[i:]
		case t[0] == '[':
			p.buf = t
		default: // "Action:" in prose
			return p.openerText()
		}
		p.enterBody()
		return true
	case mName:
		i := strings.Index(p.buf, p.f.sep)
		if i < 0 {
			if len(p.buf) > 512 {
				p.fallback()
				return true
			}
			return false
		}
		name := strings.TrimSpace(p.buf[:i])
		id := ""
		if j := strings.Index(name, "[CALL_ID]"); j >= 0 {
			name, id = name[:j], name[j+len("[CALL_ID]"):]
		}
		if p.f.nameFix != nil {
			name = p.f.nameFix(name)
		}
		if name == "" {
			return p.fallback()
		}
		p.buf = p.buf[i+len(p.f.sep):]
		p.newCall()
		p.cur.name = name
		if id != "" {
			p.cur.id = id
		}
		p.startCall()
		p.sc = scanner{callDepth: 0}
		p.cur.argsStart, p.cur.argsSent, p.cur.streaming = -1, 0, true
		p.pos = 0
		p.mode = mBody
		return true
	case mBody:
		return p.stepBody()
	case mXMLHead:
		t := strings.TrimLeft(p.buf, " \n\t\r")
		if t == "" {
			return false
		}
		if t[0] == '{' { // a JSON body inside the XML format's tags
			p.buf = t
			p.enterBody()
			return true
		}
		x := p.f.xml
		if p.xmlFns > 0 && strings.HasPrefix(t, p.f.End) { // the section ends
			p.buf, p.mode, p.xmlFns = t[len(p.f.End):], mText, 0
			return true
		}
		if len(t) < len(x.fn) && strings.HasPrefix(x.fn, t) || len(t) < len(p.f.End) && strings.HasPrefix(p.f.End, t) {
			return false
		}
		if !strings.HasPrefix(t, x.fn) {
			p.fallback()
			return true
		}
		i := strings.Index(t[len(x.fn):], x.fnEnd)
		if i < 0 {
			return len(t) > 512 && p.fallback()
		}
		name := strings.TrimSpace(t[len(x.fn) : len(x.fn)+i])
		if name == "" {
			return p.fallback()
		}
		p.newCall()
		p.cur.name = name
		p.startCall()
		p.xmlFns++
		p.buf = t[len(x.fn)+i+len(x.fnEnd):]
		p.xmlArgs = 0
		p.mode = mXML
		return true
	case mXML:
		return p.stepXML()
	case mGLMHead:
		t := strings.TrimLeft(p.buf, " \n\t\r")
		if t == "" {
			return false
		}
		if t[0] == '{' { // a JSON body inside the tags
			p.buf = t
			p.enterBody()
			return true
		}
		i := strings.IndexAny(t, "\n<")
		if i < 0 {
			return len(t) > 512 && p.fallback()
		}
		name := strings.TrimSpace(t[:i])
		if name == "" {
			return p.fallback()
		}
		p.newCall()
		p.cur.name = name
		p.startCall()
		p.buf = t[i:]
		p.xmlArgs = 0
		p.mode = mGLM
		return true
	case mGLM:
		return p.stepGLM()
	case mPyHead:
		t := strings.TrimLeft(p.buf, " \n\t\r")
		if t == "" {
			return false
		}
		p.buf = t
		if t[0] == '{' { // a JSON body inside the tags
			p.enterBody()
			return true
		}
		p.mode = mPy
		return true
	case mPy:
		if p.f.End == "" || p.f.kind != kPy {
			return false // Llama's <|python_tag|>: the call runs to the end
		}
		i := strings.Index(p.buf, p.f.End)
		if i < 0 {
			return len(p.buf) > maxCall && p.fallback()
		}
		body := p.buf[:i]
		p.buf = p.buf[i+len(p.f.End):]
		p.pyCalls(body, p.f.End)
		p.mode = mText
		return true
	case mEnd:
		t := strings.TrimLeft(p.buf, " \n\t\r")
		if t == "" {
			return false
		}
		if len(t) < len(p.f.End) && strings.HasPrefix(p.f.End, t) {
			return false
		}
		p.buf = strings.TrimPrefix(t, p.f.End)
		p.mode = mText
		return true
	}
	return false
}

func (p *Parser) stepText() bool {
	if p.f.bare && !p.started {
		// A bare call object (Llama 3) opens the output, or follows a call.
		t := strings.TrimLeft(p.buf, " \n\t\r;")
		if t == "" {
			return false
		}
		if t[0] == '{' {
			p.buf = t
			p.opener = ""
			p.enterBody()
			return true
		}
	}
	first, which := -1, ""
	for _, m := range p.openers() {
		if i := strings.Index(p.buf, m); i >= 0 && (first < 0 || i < first) {
			first, which = i, m
		}
	}
	if first >= 0 {
		p.paraText(p.buf[:first])
		p.buf = p.buf[first+len(which):]
		p.opener = which
		if which != p.f.Begin {
			if p.f.para { // the text after it is a new paragraph
				p.paraSep = p.content.Len() > 0
			}
			return true // a section marker: dropped
		}
		switch p.f.kind {
		case kNameArgs:
			p.mode = mName
		case kXML:
			p.mode = mXMLHead
		case kGLM:
			p.mode = mGLMHead
		case kPy:
			p.mode = mPyHead
		case kFunctionary:
			p.mode = mFnName
		default:
			if p.f.fence {
				p.mode = mFence
				return true
			}
			p.enterBody()
		}
		return true
	}
	// Hold back a tail that could still become a marker.
	hold := 0
	for _, m := range p.openers() {
		for k := min(len(m)-1, len(p.buf)); k > hold; k-- {
			if strings.HasSuffix(p.buf, m[:k]) {
				hold = k
				break
			}
		}
	}
	p.paraText(p.buf[:len(p.buf)-hold])
	p.buf = p.buf[len(p.buf)-hold:]
	return false
}

func (p *Parser) enterBody() {
	depth := 1
	if p.f.array {
		depth = 2
	}
	p.sc = scanner{callDepth: depth}
	p.pos = 0
	p.cur = nil
	p.mode = mBody
}

// fallback gives up on a malformed call: its text is content.
func (p *Parser) fallback() bool {
	if p.cur != nil && p.cur.started {
		// Already announced: the call ends here, what follows is text.
		if c := p.cur; p.mode == mBody && c.streaming && c.argsStart >= 0 && !c.argsDone && c.argsSent < p.pos {
			p.args(p.buf[c.argsSent:min(p.pos, len(p.buf))]) // all that was read, however the text was split
		}
		p.finish()
		rest := ""
		if p.mode == mBody && p.pos < len(p.buf) {
			rest = p.buf[p.pos:]
		}
		p.buf, p.mode = rest, mText
		return true
	}
	if p.opener != "" {
		// The opener is text; what follows is read again as text, where a
		// later opener may still start a call (as when it arrives later).
		p.cur = nil
		return p.openerText()
	}
	p.paraText(p.buf) // a bare object (Llama 3) that is not a call
	p.buf, p.cur, p.mode = "", nil, mText
	return true
}

// openerText: what follows the opener (>>>, Action:) opens no call; the
// opener is text, and a later one may still open a call.
func (p *Parser) openerText() bool {
	p.paraText(p.opener)
	p.opener, p.mode = "", mText
	return true
}

func (p *Parser) newCall() {
	p.cur = &pending{index: len(p.calls), id: p.f.NewID(), argsStart: -1}
}

func (p *Parser) startCall() {
	if p.cur.started {
		return
	}
	p.cur.started = true
	p.events = append(p.events, Event{Kind: Start, Index: p.cur.index, ID: p.cur.id, Name: p.cur.name})
}

func (p *Parser) args(s string) {
	if s == "" {
		return
	}
	p.cur.args.WriteString(s)
	p.events = append(p.events, Event{Kind: Args, Index: p.cur.index, Text: s})
}

// finish closes the current call.
func (p *Parser) finish() {
	c := p.cur
	if c.name == p.f.skip && c.name != "" {
		p.cur = nil
		return
	}
	p.startCall()
	if c.args.Len() == 0 {
		p.args("{}")
	}
	p.calls = append(p.calls, Call{ID: c.id, Name: c.name, Arguments: c.args.String()})
	p.cur = nil
}

func (p *Parser) stepBody() bool {
	if len(p.buf) > maxCall {
		return p.fallback()
	}
	sc := &p.sc
	for ; p.pos < len(p.buf); p.pos++ {
		c := p.buf[p.pos]
		if sc.callDepth == 0 { // kNameArgs: the arguments value itself
			if p.cur.argsStart < 0 {
				if isWS(c) {
					continue
				}
				p.cur.argsStart, p.cur.argsSent = p.pos, p.pos
			}
			if sc.scalar(c) && sc.depth == 0 {
				p.args(p.buf[p.cur.argsSent : p.pos+1])
				p.buf = p.buf[p.pos+1:]
				p.finish()
				p.afterBody()
				return true
			}
			continue
		}
		a, b := sc.next(p.buf, p.pos)
		for _, ev := range [2]scanEvent{a, b} {
			switch ev {
			case evBad:
				if p.f == Llama3 && p.opener == p.f.Begin && p.cur == nil && sc.depth == 0 {
					p.mode = mPy // <|python_tag|>name.call(...): a built-in tool
					return true
				}
				return p.fallback()
			case evObjStart:
				p.newCall()
			case evValStart:
				if p.cur != nil && p.isArgsKey(sc.valKey) && p.cur.argsStart < 0 {
					p.cur.argsStart, p.cur.argsSent = p.pos, p.pos
					p.cur.argsIsStr = c == '"'
					p.cur.streaming = p.cur.started && !p.cur.argsIsStr
				}
			case evValEnd:
				p.valueEnd(sc.valKey, p.buf[sc.valStart:sc.valEnd])
				if p.badName {
					p.badName = false
					return p.fallback()
				}
			case evObjEnd:
				if p.cur != nil {
					if p.cur.name == "" {
						return p.fallback()
					}
					p.finish()
				}
			}
		}
		if sc.depth == 0 && (b == evObjEnd || b == evArrEnd) {
			if p.cur != nil { // closed by the wrong bracket
				if !p.cur.started {
					return p.fallback()
				}
				p.finish()
			}
			p.buf = p.buf[p.pos+1:]
			p.afterBody()
			return true
		}
	}
	// Stream the arguments read so far.
	if c := p.cur; c != nil && c.streaming && c.argsStart >= 0 && !c.argsDone {
		// Hold trailing white space: it may follow the value's end.
		k := len(p.buf)
		for k > c.argsSent && isWS(p.buf[k-1]) {
			k--
		}
		p.args(p.buf[c.argsSent:k])
		c.argsSent = k
	}
	return false
}

func (p *Parser) isArgsKey(k string) bool {
	for _, a := range p.f.argsKeys {
		if k == a {
			return true
		}
	}
	return false
}

func (p *Parser) valueEnd(key, raw string) {
	c := p.cur
	if c == nil {
		return
	}
	switch {
	case key == p.f.nameK():
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil && s != "" && c.name == "" {
			if p.opener == "" && len(p.names) > 0 && !p.names[s] {
				p.badName = true // {"name": "Ann", ...} in a JSON answer is not a call
				return
			}
			c.name = s
			if s == p.f.skip {
				return // never announced, dropped at finish
			}
			p.startCall()
		}
	case key == "id":
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil && s != "" && !c.started {
			c.id = s
		}
	case p.isArgsKey(key) && !c.argsDone:
		c.argsDone = true
		switch {
		case c.streaming:
			if end := c.argsStart + len(raw); end > c.argsSent {
				p.args(p.buf[c.argsSent:end])
			}
		case c.argsIsStr:
			var s string
			if json.Unmarshal([]byte(raw), &s) == nil && json.Valid([]byte(s)) {
				raw = s
			}
			if c.name != "" {
				p.args(raw)
			} else {
				c.args.WriteString(raw) // sent at finish, after Start
			}
		default:
			c.args.WriteString(raw)
		}
	}
	if c.started && !c.streaming && c.args.Len() > 0 && key == p.f.nameK() {
		// The arguments came before the name: send them now.
		s := c.args.String()
		c.args.Reset()
		p.args(s)
	}
}

// afterBody follows a complete body.
func (p *Parser) afterBody() {
	p.cur = nil
	if p.f.End != "" {
		p.mode = mEnd
	} else {
		p.mode = mText
	}
}

func (p *Parser) stepXML() bool {
	x := p.f.xml
	pOpen, pClose, fClose := x.param, x.paramClose, x.fnClose
	t := strings.TrimLeft(p.buf, " \n\t\r")
	if t == "" {
		return false
	}
	if strings.HasPrefix(t, fClose) {
		p.endXML()
		p.buf = t[len(fClose):]
		p.mode = mXMLHead // another function, or the end of the section
		return true
	}
	if !strings.HasPrefix(t, pOpen) {
		if len(t) < len(pOpen) && (strings.HasPrefix(pOpen, t) || strings.HasPrefix(fClose, t)) {
			return false
		}
		if len(t) > maxCall {
			return p.fallback()
		}
		// Unexpected text inside the function: wait for a closing tag.
		if i := strings.Index(t, fClose); i >= 0 {
			p.buf = t[i:]
			return true
		}
		return false
	}
	gt := strings.Index(t[len(pOpen):], x.paramEnd)
	end := strings.Index(t, pClose)
	if gt < 0 || end < 0 || end < len(pOpen)+gt {
		return len(t) > maxCall && p.fallback()
	}
	gt += len(pOpen)
	p.xmlArg(strings.TrimSpace(t[len(pOpen):gt]), t[gt+len(x.paramEnd):end])
	p.buf = t[end+len(pClose):]
	return true
}

func (p *Parser) stepGLM() bool {
	const kOpen, kClose, vOpen, vClose = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
	t := strings.TrimLeft(p.buf, " \n\t\r")
	if t == "" {
		return false
	}
	if strings.HasPrefix(t, p.f.End) {
		p.endXML()
		p.buf = t[len(p.f.End):]
		p.mode = mText
		return true
	}
	if !strings.HasPrefix(t, kOpen) {
		if len(t) < len(kOpen) && (strings.HasPrefix(kOpen, t) || strings.HasPrefix(p.f.End, t)) {
			return false
		}
		if i := strings.Index(t, p.f.End); i >= 0 { // stray text: skip to the end
			p.buf = t[i:]
			return true
		}
		return len(t) > maxCall && p.fallback()
	}
	ke := strings.Index(t, kClose)
	vs := strings.Index(t, vOpen)
	ve := strings.Index(t, vClose)
	if ke < 0 || vs < ke || ve < vs {
		return len(t) > maxCall && p.fallback()
	}
	p.xmlArg(strings.TrimSpace(t[len(kOpen):ke]), t[vs+len(vOpen):ve])
	p.buf = t[ve+len(vClose):]
	return true
}

// xmlArg writes one parameter of an XML-style call as a JSON member: a
// string parameter (by the tool's schema) as a string, another as its
// JSON when it is JSON.
func (p *Parser) xmlArg(key, val string) {
	val = strings.TrimPrefix(val, "\n")
	val = strings.TrimSuffix(val, "\n")
	kj, _ := json.Marshal(key)
	var vj []byte
	if p.types[p.cur.name][key] != "string" && json.Valid([]byte(val)) {
		vj = []byte(strings.TrimSpace(val))
	} else {
		vj, _ = json.Marshal(val)
	}
	sep := ", "
	if p.xmlArgs == 0 {
		sep = "{"
	}
	p.xmlArgs++
	p.args(sep + string(kj) + ": " + string(vj))
}

// endXML closes an XML-style call.
func (p *Parser) endXML() {
	if p.xmlArgs == 0 {
		p.args("{}")
	} else {
		p.args("}")
	}
	p.calls = append(p.calls, Call{ID: p.cur.id, Name: p.cur.name, Arguments: p.cur.args.String()})
	p.cur = nil
}

// pyCalls reads a body of Python calls; one that is not is content.
func (p *Parser) pyCalls(body, end string) {
	calls, ok := parsePyCalls(body, p.f.kind == kPy)
	if !ok {
		p.paraText(p.opener + body + end)
		return
	}
	for _, c := range calls {
		p.newCall()
		p.cur.name = c.name
		p.startCall()
		p.args(c.args)
		p.finish()
	}
}

// scanner follows JSON structure one byte at a time, reporting the
// boundaries of call objects and of their top-level values.
type scanner struct {
	callDepth        int // depth of the call objects (1, or 2 inside an array); 0: a bare value
	depth            int
	inStr, esc       bool
	isKey, expectKey bool
	keyStart         int
	key, valKey      string
	inVal, valCont   bool
	valStart, valEnd int
	lastNonWS        int
}

type scanEvent uint8

const (
	evNone scanEvent = iota
	evObjStart
	evObjEnd
	evArrEnd
	evValStart
	evValEnd
	evBad
)

// scalar follows a bare JSON value (kNameArgs) and reports when a
// container closes back to depth 0.
func (s *scanner) scalar(c byte) bool {
	if s.inStr {
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr = false
		}
		return false
	}
	switch c {
	case '"':
		s.inStr = true
	case '{', '[':
		s.depth++
	case '}', ']':
		s.depth--
		return s.depth <= 0
	}
	return false
}

// next takes buf[i]; one byte can end a value and its object both.
func (s *scanner) next(buf string, i int) (scanEvent, scanEvent) {
	c := buf[i]
	if s.inStr {
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr = false
			if s.isKey {
				s.isKey = false
				s.key = ""
				json.Unmarshal([]byte(buf[s.keyStart:i+1]), &s.key)
			} else if s.inVal && !s.valCont && s.depth == s.callDepth {
				s.inVal, s.valEnd = false, i+1
				return evValEnd, evNone
			}
		}
		return evNone, evNone
	}
	at := s.depth == s.callDepth
	switch c {
	case '"':
		if at && s.inVal && !s.valCont {
			return evBad, evNone // a string inside a scalar: not JSON
		}
		s.inStr = true
		if at && !s.inVal {
			if s.expectKey {
				s.isKey, s.keyStart = true, i
				return evNone, evNone
			}
			s.inVal, s.valCont, s.valKey, s.valStart = true, false, s.key, i
			return evValStart, evNone
		}
		return evNone, evNone
	case '{', '[':
		if s.depth == 0 && (c == '[') != (s.callDepth == 2) || at && s.inVal && !s.valCont {
			return evBad, evNone
		}
		ev := evNone
		if at && !s.inVal {
			s.inVal, s.valCont, s.valKey, s.valStart = true, true, s.key, i
			ev = evValStart
		}
		s.depth++
		if s.depth == s.callDepth && c == '{' {
			s.expectKey, s.key = true, ""
			return evObjStart, evNone
		}
		return ev, evNone
	case '}', ']':
		if s.depth == 0 {
			return evBad, evNone
		}
		first := evNone
		if at && s.inVal && !s.valCont {
			s.inVal, s.valEnd = false, s.lastNonWS+1
			first = evValEnd
		}
		s.depth--
		if s.depth == s.callDepth && s.inVal && s.valCont {
			s.inVal, s.valEnd = false, i+1
			return evValEnd, evNone
		}
		if s.depth == s.callDepth-1 && c == '}' {
			return first, evObjEnd
		}
		if s.depth == 0 {
			return first, evArrEnd
		}
		return first, evNone
	case ':':
		if at {
			s.expectKey = false
		}
		return evNone, evNone
	case ',':
		if at {
			s.expectKey = true
			if s.inVal && !s.valCont {
				s.inVal, s.valEnd = false, s.lastNonWS+1
				return evValEnd, evNone
			}
		}
		return evNone, evNone
	}
	if isWS(c) {
		return evNone, evNone
	}
	if s.depth == 0 {
		return evBad, evNone
	}
	s.lastNonWS = i
	if at && !s.inVal && !s.expectKey {
		s.inVal, s.valCont, s.valKey, s.valStart = true, false, s.key, i
		return evValStart, evNone
	}
	return evNone, evNone
}
