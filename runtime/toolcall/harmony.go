package toolcall

import "strings"

// Harmony (gpt-oss) output is a run of messages, each a header up to
// <|message|> then a body up to <|end|>, <|call|> or <|return|>; the next
// opens with <|start|>assistant. The generation prompt ends with
// <|start|>assistant, so the output opens with the first header. A
// message whose header addresses to=functions.NAME is a call, its body
// the arguments; the bodies of the others (analysis, commentary, final)
// are content, one message from the next by a blank line.

const (
	harStart, harMessage, harEnd, harReturn = "<|start|>", "<|message|>", "<|end|>", "<|return|>"
	harMaxHead                              = 512 // a header longer than this is not one
)

// harHeadStarts are what a header (after <|start|>) may open with, and
// the framing before it (a piece of it may still arrive).
var harHeadStarts = []string{"<|channel|>", "<|constrain|>", harMessage, "to=", "assistant", harStart, harEnd, harReturn, "<|call|>"}

// looksHead: t opens like a header, or (partial: more is to come) could
// still become the start of one.
func looksHead(t string, partial bool) bool {
	t = strings.TrimLeft(t, " \n\t\r")
	for _, h := range harHeadStarts {
		if strings.HasPrefix(t, h) || partial && strings.HasPrefix(h, t) {
			return true
		}
	}
	return false
}

// stepHarmonyHead reads a message header (mode mText for harmony).
func (p *Parser) stepHarmonyHead() bool {
	t := p.buf
	for { // drop the framing between messages
		u := strings.TrimLeft(t, " \n\t\r")
		n := len(u)
		for _, m := range []string{harEnd, harReturn, p.f.End, harStart} {
			u = strings.TrimPrefix(u, m)
		}
		if len(u) == n {
			break
		}
		t = u
	}
	p.buf = t
	if strings.TrimLeft(t, " \n\t\r") == "" {
		return false
	}
	i := strings.Index(t, harMessage)
	if i < 0 || i > harMaxHead || !looksHead(t[:i], false) {
		if i < 0 && len(t) <= harMaxHead+len(harMessage) && looksHead(t, true) {
			return false // more header to come
		}
		p.mode = mHarText // not a header: plain text
		return true
	}
	head := t[:i]
	p.buf = t[i+len(harMessage):]
	to := ""
	if j := strings.Index(head, "to="); j >= 0 {
		to = head[j+len("to="):]
		if k := strings.IndexAny(to, " \n\t\r<"); k >= 0 {
			to = to[:k]
		}
	}
	name := strings.TrimPrefix(to, "functions.")
	if name == "" || to == "assistant" {
		p.paraSep = p.content.Len() > 0
		p.mode = mHarText
		return true
	}
	p.newCall()
	p.cur.name = name
	p.startCall()
	p.sc = scanner{}
	p.cur.argsStart, p.cur.argsSent, p.cur.streaming = -1, 0, true
	p.opener, p.pos, p.mode = "", 0, mBody
	return true
}

// harTerms end a text body: the first three close the message, the
// others open a new header without closing it.
var harTerms = []string{harEnd, harReturn, "<|call|>", harStart, "<|channel|>"}

// stepHarmonyText reads the body of a text message.
func (p *Parser) stepHarmonyText() bool {
	first, which := -1, 0
	for w, m := range harTerms {
		if i := strings.Index(p.buf, m); i >= 0 && (first < 0 || i < first) {
			first, which = i, w
		}
	}
	if first >= 0 {
		p.paraText(p.buf[:first])
		p.buf = p.buf[first:]
		if which < 3 {
			p.buf = p.buf[len(harTerms[which]):]
		}
		p.mode = mText
		return true
	}
	hold := 0
	for _, m := range harTerms {
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
