package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
)

const maxBody = 8 << 20

// apiError is an error answer in an API-neutral form; each API writes it
// in its own shape.
type apiError struct {
	status     int
	kind       string // "invalid_request", "not_found", "rate_limit", "overloaded", "server"
	msg        string
	param      string
	retryAfter int // seconds; 0 = no Retry-After
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, kind: "invalid_request", msg: fmt.Sprintf(format, args...), param: param}
}

func unsupported(field string) *apiError {
	return badRequest(field, "unsupported field %q: jitllm does not implement it yet", field)
}

// readObject reads the body as one JSON object, refusing keys outside
// accepted (refused lists fields known but not implemented, for a clearer
// message).
func readObject(r *http.Request, accepted map[string]bool) (map[string]json.RawMessage, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, kind: "invalid_request", msg: fmt.Sprintf("request body over %d bytes", maxBody)}
		}
		return nil, badRequest("", "reading the request body: %v", err)
	}
	return parseObject(body, "", accepted)
}

func parseObject(b []byte, path string, accepted map[string]bool) (map[string]json.RawMessage, *apiError) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&obj); err != nil {
		if path == "" {
			return nil, badRequest("", "malformed JSON in the request body: %v", err)
		}
		return nil, badRequest(path, "%s: expected a JSON object: %v", path, err)
	}
	if obj == nil {
		return nil, badRequest(path, "expected a JSON object, got null")
	}
	if dec.More() {
		return nil, badRequest("", "malformed JSON: data after the top-level object")
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !accepted[k] {
			name := k
			if path != "" {
				name = path + "." + k
			}
			return nil, unsupported(name)
		}
	}
	return obj, nil
}

// field decodes obj[key] into v when present and not null; it reports
// whether it was.
func field(obj map[string]json.RawMessage, key string, v any) (bool, *apiError) {
	raw, ok := obj[key]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false, badRequest(key, "field %q: %v", key, err)
	}
	return true, nil
}

// stringOrList decodes a string or an array of strings (OpenAI's stop).
func stringOrList(obj map[string]json.RawMessage, key string) ([]string, *apiError) {
	raw, ok := obj[key]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(key, "field %q: expected a string or an array of strings", key)
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) > 16 {
		return nil, badRequest(key, "field %q: at most 16 stop sequences", key)
	}
	return out, nil
}

// textContent decodes message content: a string, or an array of text
// parts {"type": "text", "text": ...} (both APIs use this shape; extra
// part keys in extraPart are accepted and ignored).
func textContent(raw json.RawMessage, path string, extraPart map[string]bool) (string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(path, "%s: expected a string or an array of content parts", path)
	}
	accepted := map[string]bool{"type": true, "text": true}
	for k := range extraPart {
		accepted[k] = true
	}
	var b strings.Builder
	for i, p := range parts {
		pp := fmt.Sprintf("%s[%d]", path, i)
		obj, e := parseObject(p, pp, accepted)
		if e != nil {
			return "", e
		}
		var typ, text string
		if _, e := field(obj, "type", &typ); e != nil {
			return "", e
		}
		if typ != "text" {
			return "", badRequest(pp+".type", "unsupported content part type %q at %s: only \"text\" is implemented", typ, pp)
		}
		if _, e := field(obj, "text", &text); e != nil {
			return "", e
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

func set(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}
