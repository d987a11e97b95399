package server

import (
	"net/http"
	"sort"

	"github.com/jitllm/jitllm/runtime/capabilities"
)

// route is one API endpoint. The same table registers the handlers and
// declares the endpoints (with the request fields each accepts) to
// runtime/capabilities, so the capabilities report cannot drift from what
// the server serves.
type route struct {
	method, path, name string
	handler            func(*Server) http.HandlerFunc
	fields             map[string]bool // accepted top-level request fields (nil: no body)
	refuses            []string        // well-known fields refused by name until implemented
}

var openAIRefused = []string{"tools", "tool_choice", "functions", "function_call", "response_format", "logit_bias", "parallel_tool_calls"}

var routes = []route{
	{"GET", "/v1/models", "models", func(s *Server) http.HandlerFunc { return s.handleModels }, nil, nil},
	{"GET", "/v1/models/{id...}", "models", func(s *Server) http.HandlerFunc { return s.handleModel }, nil, nil},
	{"POST", "/v1/completions", "completions", func(s *Server) http.HandlerFunc { return s.handleCompletions }, completionFields, append([]string{"suffix"}, openAIRefused...)},
	{"POST", "/v1/chat/completions", "chat_completions", func(s *Server) http.HandlerFunc { return s.handleChat }, chatFields, []string{"functions", "function_call", "logit_bias"}},
	{"POST", "/v1/embeddings", "embeddings", func(s *Server) http.HandlerFunc { return s.handleEmbeddings }, embeddingFields, nil},
	{"POST", "/v1/messages", "messages", func(s *Server) http.HandlerFunc { return s.handleMessages }, messagesFields, []string{"thinking"}},
	{"GET", "/v1/capabilities", "capabilities", func(*Server) http.HandlerFunc { return serveCapabilities }, nil, nil},
}

func init() {
	for _, rt := range routes {
		capabilities.RegisterEndpoint(capabilities.Endpoint{Method: rt.method, Path: rt.path, Accepts: sortedKeys(rt.fields), Refuses: rt.refuses})
	}
}

// serveCapabilities answers with the same JSON as `jitllm capabilities -json`.
func serveCapabilities(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(capabilities.JSON())
}

func sortedKeys(m map[string]bool) []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
