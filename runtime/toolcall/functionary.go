package toolcall

import "strings"

// Functionary v3.2 writes each message as >>>RECIPIENT\nBODY: RECIPIENT
// "all" is text to the user, any other is a call of that function with
// BODY its JSON arguments. The generation prompt ends with >>>, so the
// output opens with the first recipient.

const fnMaxName = 128 // a recipient longer than this is not one

// stepFnName reads a recipient and the start of its body.
func (p *Parser) stepFnName() bool {
	i := strings.IndexByte(p.buf, '\n')
	if i < 0 {
		if len(p.buf) > fnMaxName || strings.ContainsAny(p.buf, " \t\r{") {
			return p.openerText()
		}
		return false
	}
	name := p.buf[:i]
	if name == "all" { // text follows, up to the next >>>
		p.buf, p.mode = p.buf[i+1:], mText
		return true
	}
	if name == "" || len(name) > fnMaxName || strings.ContainsAny(name, " \t\r{") {
		return p.openerText()
	}
	body := strings.TrimLeft(p.buf[i+1:], " \n\t\r")
	if body == "" {
		return false
	}
	if body[0] != '{' { // not JSON arguments (code for python is not supported): text
		return p.openerText()
	}
	p.buf = p.buf[i+1:]
	p.newCall()
	p.cur.name = name
	p.startCall()
	p.sc = scanner{}
	p.cur.argsStart, p.cur.argsSent, p.cur.streaming = -1, 0, true
	p.pos, p.mode = 0, mBody
	return true
}
