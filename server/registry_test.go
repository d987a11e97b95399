package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jitllm/jitllm/runtime/generate"
)

// chatOn runs a greedy chat turn on a named session and returns the text.
func chatOn(t *testing.T, url, model, session string, msgs []map[string]string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "max_tokens": 24, "temperature": 0})
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set(SessionHeader, session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil || len(out.Choices) != 1 {
		t.Fatalf("chat on %s: %d %s", session, resp.StatusCode, b)
	}
	return out.Choices[0].Message.Content
}

// A re-placement (here onto a fresh CPU engine: the move a cpu <-> cuda
// placement makes, without a GPU) carries named sessions along: an active
// one and a parked one continue their conversation on the new entry as a
// session that never moved does, and the old entry drains.
func TestMoveCarriesSessions(t *testing.T) {
	s, hs := newTest(t, Config{MaxSessions: 3})
	ref, err := generate.Open(td + "stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddModel("ref", ref); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	newSession := func(model string) string {
		si, err := s.CreateSession(ctx, model)
		if err != nil {
			t.Fatal(err)
		}
		return si.ID
	}
	active, parked, never := newSession("stories"), newSession("stories"), newSession("ref")
	turn1 := []map[string]string{{"role": "user", "content": "Once upon a time"}}
	reply := chatOn(t, hs.URL, "ref", never, turn1)
	for _, id := range []string{active, parked} {
		if got := chatOn(t, hs.URL, "stories", id, turn1); got != reply {
			t.Fatalf("turn 1 on %s: %q, want %q", id, got, reply)
		}
	}
	if _, err := s.ParkSession(parked); err != nil {
		t.Fatal(err)
	}
	before, _ := s.GetSession(active)

	old, _ := s.model("stories")
	if _, err := s.move(old, "cpu", time.Minute); err != nil {
		t.Fatal(err)
	}
	now, _ := s.model("stories")
	if now == old || old.next.Load() != now || !old.pool.closed {
		t.Fatal("the move did not replace and drain the entry")
	}
	if after, _ := s.GetSession(active); after.State != SessionParked || after.Tokens != before.Tokens {
		t.Fatalf("the active session after the move: %+v (before %+v)", after, before)
	}
	if got := len(old.pool.sem); got != old.pool.max {
		t.Fatalf("the old pool holds %d of %d slots after draining", got, old.pool.max)
	}

	turn2 := append(append([]map[string]string{}, turn1...), map[string]string{"role": "assistant", "content": reply}, map[string]string{"role": "user", "content": "And then?"})
	want := chatOn(t, hs.URL, "ref", never, turn2)
	for _, id := range []string{active, parked} {
		if got := chatOn(t, hs.URL, "stories", id, turn2); got != want {
			t.Fatalf("turn 2 on %s after the move: %q, want %q", id, got, want)
		}
		if si, _ := s.GetSession(id); si.State != SessionActive {
			t.Fatalf("%s after its turn: %+v", id, si)
		}
	}
	// The moved model unloads cleanly (its predecessor has drained).
	res, err := s.UnloadModel("stories", time.Second)
	if err != nil || res.Sessions != 2 {
		t.Fatalf("unload after the move: %+v %v", res, err)
	}
}
