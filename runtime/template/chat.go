package template

import (
	"fmt"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// Message is one chat turn.
type Message struct {
	Role    string
	Content string
	// Fields are more keys of the message's dict, a JSON object (order
	// kept): tool_calls on an assistant turn, tool_call_id on a tool one.
	Fields []byte
}

// ChatOptions are the variables besides messages that chat templates read.
type ChatOptions struct {
	BOS, EOS            string // bos_token and eos_token
	AddGenerationPrompt bool
	Now                 func() time.Time // strftime_now's clock; nil = time.Now
	Tools               []byte           // the tools variable, a JSON array; nil = undefined
}

// Chat renders messages (passed as ordered dicts {role, content, Fields...}).
func (t *Template) Chat(msgs []Message, o ChatOptions) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		if len(m.Fields) > 0 {
			v, err := ParseJSON(m.Fields)
			if err != nil || !v.IsDict() {
				return "", fmt.Errorf("template: message %d: fields must be a JSON object (%v)", i, err)
			}
			for _, k := range v.AsDict().Keys {
				d.AsDict().Set(k, v.AsDict().Data[k])
			}
		}
		list[i] = d
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"add_generation_prompt": jinja.NewBool(o.AddGenerationPrompt),
		"bos_token":             jinja.NewString(o.BOS),
		"eos_token":             jinja.NewString(o.EOS),
	}
	if len(o.Tools) > 0 {
		v, err := ParseJSON(o.Tools)
		if err != nil {
			return "", fmt.Errorf("template: tools: %v", err)
		}
		data["tools"] = v
	}
	if o.Now != nil {
		data["strftime_now"] = strftimeNow(o.Now)
	}
	return t.RenderValues(data)
}

// Fallback is the prompt format for models without a chat template: one
// "role: content" line per message and, with a generation prompt,
// "assistant:" to end it.
func Fallback(msgs []Message, o ChatOptions) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Content)
	}
	if o.AddGenerationPrompt {
		b.WriteString("assistant:")
	}
	return b.String()
}

// strftimeNow is the strftime_now(format) global on a given clock.
func strftimeNow(now func() time.Time) jinja.Value {
	return jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now: expected one format string")
		}
		return jinja.NewString(Strftime(now(), args[0].AsString())), nil
	})
}

// Strftime formats t with C strftime directives (the common ones).
func Strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' || i+1 == len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case '-':
			if i+1 < len(f) {
				i++
				switch f[i] {
				case 'd':
					fmt.Fprintf(&b, "%d", t.Day())
				case 'm':
					fmt.Fprintf(&b, "%d", int(t.Month()))
				case 'H':
					fmt.Fprintf(&b, "%d", t.Hour())
				default:
					b.WriteString("%-" + string(f[i]))
				}
			}
		case 'B':
			b.WriteString(t.Month().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(f[i])
		}
	}
	return b.String()
}
