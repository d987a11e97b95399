package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jitllm/jitllm/runtime/generate"
)

const td = "../testdata/"

type refResult struct {
	Prompt        string  `json:"prompt"`
	GeneratedText string  `json:"generated_text"`
	GeneratedIDs  []int32 `json:"generated_ids"`
}

func refs(t testing.TB) []refResult {
	t.Helper()
	b, err := os.ReadFile(td + "refs/stories260K/generate.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct{ Results []refResult }
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref.Results
}

// newTest serves stories260K as "stories" on a loopback httptest server.
func newTest(t testing.TB, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Threads == 0 {
		cfg.Threads = 1
	}
	s := New(cfg)
	m, err := generate.Open(td + "stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddModel("stories", m); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return s, hs
}

func post(t testing.TB, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	name string
	data string
}

// parseSSE checks the framing strictly: every event is "event: x\n"
// (optional) then "data: ...\n" then a blank line, nothing else.
func parseSSE(t testing.TB, body []byte) []sseEvent {
	t.Helper()
	var evs []sseEvent
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", tail(body))
	}
	for _, block := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		var ev sseEvent
		lines := strings.Split(block, "\n")
		if strings.HasPrefix(lines[0], "event: ") {
			ev.name = strings.TrimPrefix(lines[0], "event: ")
			lines = lines[1:]
		}
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "data: ") {
			t.Fatalf("bad SSE block %q", block)
		}
		ev.data = strings.TrimPrefix(lines[0], "data: ")
		evs = append(evs, ev)
	}
	return evs
}

func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

// readSSE reads events from a live stream.
func readSSE(r io.Reader, fn func(sseEvent) bool) error {
	sc := bufio.NewScanner(r)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		case line == "":
			if !fn(ev) {
				return nil
			}
			ev = sseEvent{}
		}
	}
	return sc.Err()
}

// settleGoroutines waits for the goroutine count to fall to at most n.
func settleGoroutines(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= n {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d, want <= %d\n%s", got, n, buf)
		}
		http.DefaultClient.CloseIdleConnections()
		time.Sleep(20 * time.Millisecond)
	}
}
