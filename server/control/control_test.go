package control_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/jitllm/jitllm/runtime/generate"
	"github.com/jitllm/jitllm/server"
	"github.com/jitllm/jitllm/server/control"
	controlv1 "github.com/jitllm/jitllm/server/control/gen/jitllm/control/v1"
	"github.com/jitllm/jitllm/server/control/gen/jitllm/control/v1/controlv1connect"
)

const td = "../../testdata/"

type env struct {
	srv      *server.Server
	hs       *httptest.Server
	models   controlv1connect.ModelServiceClient
	devices  controlv1connect.DeviceServiceClient
	sessions controlv1connect.SessionServiceClient
}

// newEnv serves stories260K as "stories" with the control plane mounted,
// loads allowed from testdata and from extra.
func newEnv(t *testing.T, slots int, extra ...string) *env {
	t.Helper()
	srv := server.New(server.Config{Threads: 1, MaxSessions: slots, QueueWait: 2 * time.Second, LoadDirs: append([]string{td}, extra...)})
	m, err := generate.Open(td + "stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddModel("stories", m); err != nil {
		t.Fatal(err)
	}
	control.Register(srv)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	c := hs.Client()
	return &env{srv: srv, hs: hs, models: controlv1connect.NewModelServiceClient(c, hs.URL),
		devices: controlv1connect.NewDeviceServiceClient(c, hs.URL), sessions: controlv1connect.NewSessionServiceClient(c, hs.URL)}
}

func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, code)
	}
}

// chat runs a greedy chat request (on session, when set) and returns the
// status and the reply's text.
func (e *env) chat(t *testing.T, model, session string, msgs []map[string]string, maxTokens int) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "max_tokens": maxTokens, "temperature": 0})
	req, _ := http.NewRequest("POST", e.hs.URL+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set(server.SessionHeader, session)
	}
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return resp.StatusCode, string(b)
	}
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("chat answer %s: %v", b, err)
	}
	return 200, out.Choices[0].Message.Content
}

func user(text string) []map[string]string {
	return []map[string]string{{"role": "user", "content": text}}
}

func ids(ms []*controlv1.Model) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Id)
	}
	return out
}

func TestListLoadUnloadLoadAgain(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	list, err := e.models.ListModels(ctx, connect.NewRequest(&controlv1.ListModelsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(list.Msg.Models); len(got) != 1 || got[0] != "stories" {
		t.Fatalf("models %v, want [stories]", got)
	}
	m := list.Msg.Models[0]
	if m.Family != "llama" || m.Device != "cpu" || m.Context != 2048 || m.Slots != 1 || m.Blocks != 5 ||
		len(m.QuantTypes) == 0 || m.Parameters < 200_000 || m.Memory.GetKvBytes() <= 0 || m.Memory.GetTotalBytes() <= m.Memory.GetWeightsBytes() {
		t.Fatalf("stories described as %v", m)
	}
	_, want := e.chat(t, "stories", "", user("Once upon a time"), 12)

	for round := 0; round < 2; round++ {
		ld, err := e.models.LoadModel(ctx, connect.NewRequest(&controlv1.LoadModelRequest{Path: td + "stories260K.gguf", Id: "s2", Context: 128}))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if ld.Msg.Model.Id != "s2" || ld.Msg.Model.Context != 128 || ld.Msg.Model.Device != "cpu" {
			t.Fatalf("loaded %v", ld.Msg.Model)
		}
		list, _ = e.models.ListModels(ctx, connect.NewRequest(&controlv1.ListModelsRequest{}))
		if got := strings.Join(ids(list.Msg.Models), ","); got != "s2,stories" {
			t.Fatalf("models %s after load", got)
		}
		// The loaded model serves the same text as the one loaded at start.
		if code, got := e.chat(t, "s2", "", user("Once upon a time"), 12); code != 200 || got != want {
			t.Fatalf("s2 answered %d %q, stories %q", code, got, want)
		}
		un, err := e.models.UnloadModel(ctx, connect.NewRequest(&controlv1.UnloadModelRequest{Id: "s2"}))
		if err != nil {
			t.Fatal(err)
		}
		if un.Msg.CancelledRequests != 0 {
			t.Fatalf("an idle unload cancelled %d requests", un.Msg.CancelledRequests)
		}
		if code, _ := e.chat(t, "s2", "", user("Once upon a time"), 4); code != 404 {
			t.Fatalf("unloaded model answered %d, want 404", code)
		}
		list, _ = e.models.ListModels(ctx, connect.NewRequest(&controlv1.ListModelsRequest{}))
		if got := strings.Join(ids(list.Msg.Models), ","); got != "stories" {
			t.Fatalf("models %s after unload", got)
		}
	}
}

func TestLoadBadInput(t *testing.T) {
	outside := t.TempDir()
	junkDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(junkDir, "junk.gguf"), []byte("not a model file at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "x.gguf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1, junkDir)
	ctx := context.Background()
	model := td + "stories260K.gguf"
	for _, c := range []struct {
		name string
		req  *controlv1.LoadModelRequest
		code connect.Code
		msg  string
	}{
		{"no path", &controlv1.LoadModelRequest{}, connect.CodeInvalidArgument, "path is empty"},
		{"missing file", &controlv1.LoadModelRequest{Path: td + "nope.gguf"}, connect.CodeNotFound, "no file"},
		{"not a model", &controlv1.LoadModelRequest{Path: filepath.Join(junkDir, "junk.gguf")}, connect.CodeInvalidArgument, "junk.gguf"},
		{"wrong extension", &controlv1.LoadModelRequest{Path: td + "README.md"}, connect.CodeInvalidArgument, "not a .gguf or .jlm"},
		{"outside the load dirs", &controlv1.LoadModelRequest{Path: filepath.Join(outside, "x.gguf")}, connect.CodePermissionDenied, "outside the load directories"},
		{"escape by ..", &controlv1.LoadModelRequest{Path: junkDir + "/../" + filepath.Base(outside) + "/x.gguf"}, connect.CodePermissionDenied, "outside"},
		{"taken id", &controlv1.LoadModelRequest{Path: model, Id: "stories"}, connect.CodeAlreadyExists, "unload it first"},
		{"bad id", &controlv1.LoadModelRequest{Path: model, Id: "a b"}, connect.CodeInvalidArgument, "space"},
		{"negative context", &controlv1.LoadModelRequest{Path: model, Id: "x", Context: -1}, connect.CodeInvalidArgument, "context"},
		{"absurd context", &controlv1.LoadModelRequest{Path: model, Id: "x", Context: 1 << 30}, connect.CodeInvalidArgument, "context"},
		{"context over the trained one", &controlv1.LoadModelRequest{Path: model, Id: "x", Context: 4096}, connect.CodeInvalidArgument, "trained context of 2048"},
		{"unknown device", &controlv1.LoadModelRequest{Path: model, Id: "x", Devices: "tpu"}, connect.CodeInvalidArgument, "unknown device"},
	} {
		_, err := e.models.LoadModel(ctx, connect.NewRequest(c.req))
		wantCode(t, c.name, err, c.code)
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want it to mention %q", c.name, err, c.msg)
		}
	}
	_, err := e.models.UnloadModel(ctx, connect.NewRequest(&controlv1.UnloadModelRequest{Id: "nope"}))
	wantCode(t, "unload unknown", err, connect.CodeNotFound)
	_, err = e.models.UnloadModel(ctx, connect.NewRequest(&controlv1.UnloadModelRequest{Id: "stories", Grace: durationpb.New(-time.Second)}))
	wantCode(t, "negative grace", err, connect.CodeInvalidArgument)
	list, _ := e.models.ListModels(ctx, connect.NewRequest(&controlv1.ListModelsRequest{}))
	if got := strings.Join(ids(list.Msg.Models), ","); got != "stories" {
		t.Fatalf("after refused loads the models are %s", got)
	}
}

// stream starts a streamed chat and returns its body once the first
// content chunk arrived.
func (e *env) stream(t *testing.T, maxTokens int) *bufio.Reader { return e.streamOn(t, "", maxTokens) }

func (e *env) streamOn(t *testing.T, session string, maxTokens int) *bufio.Reader {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "stories", "messages": user("Once upon a time"), "max_tokens": maxTokens, "temperature": 0, "stream": true})
	req, _ := http.NewRequest("POST", e.hs.URL+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set(server.SessionHeader, session)
	}
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before any content: %v", err)
		}
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			return r
		}
	}
}

func TestUnloadWhileStreaming(t *testing.T) {
	ctx := context.Background()
	t.Run("cancelled", func(t *testing.T) {
		e := newEnv(t, 1)
		r := e.stream(t, 480)
		un, err := e.models.UnloadModel(ctx, connect.NewRequest(&controlv1.UnloadModelRequest{Id: "stories", Grace: durationpb.New(0)}))
		if err != nil {
			t.Fatal(err)
		}
		if un.Msg.CancelledRequests != 1 {
			t.Fatalf("cancelled %d requests, want the stream", un.Msg.CancelledRequests)
		}
		rest, _ := io.ReadAll(r)
		if !strings.Contains(string(rest), "was unloaded") || strings.Contains(string(rest), "[DONE]") {
			t.Fatalf("the stream's end: %q", tail(string(rest)))
		}
		if code, _ := e.chat(t, "stories", "", user("x"), 2); code != 404 {
			t.Fatalf("after unload: %d", code)
		}
	})
	t.Run("finishes within grace", func(t *testing.T) {
		e := newEnv(t, 1)
		r := e.stream(t, 200)
		done := make(chan *controlv1.UnloadModelResponse, 1)
		go func() {
			un, err := e.models.UnloadModel(ctx, connect.NewRequest(&controlv1.UnloadModelRequest{Id: "stories", Grace: durationpb.New(time.Minute)}))
			if err != nil {
				t.Error(err)
			}
			done <- un.Msg
		}()
		rest, _ := io.ReadAll(r)
		if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
			t.Fatalf("the stream's end: %q", tail(string(rest)))
		}
		if un := <-done; un == nil || un.CancelledRequests != 0 {
			t.Fatalf("unload answered %v", un)
		}
	})
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

func TestDevicesAndPlacement(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	devs, err := e.devices.ListDevices(ctx, connect.NewRequest(&controlv1.ListDevicesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs.Msg.Devices) == 0 || devs.Msg.Devices[0].Id != "cpu" || devs.Msg.Devices[0].Kind != "cpu" ||
		devs.Msg.Devices[0].MemTotalBytes == 0 || len(devs.Msg.Devices[0].Backends) == 0 {
		t.Fatalf("devices %v", devs.Msg.Devices)
	}
	pl, err := e.devices.GetPlacement(ctx, connect.NewRequest(&controlv1.GetPlacementRequest{ModelId: "stories"}))
	if err != nil {
		t.Fatal(err)
	}
	p := pl.Msg.Placements[0]
	if p.Device != "cpu" || len(p.Blocks) != 5+2 || p.Blocks[0].Block != "embed" || p.Blocks[1].Block != "blk.0" || p.Blocks[6].Block != "output" {
		t.Fatalf("placement %v", p)
	}
	for _, b := range p.Blocks {
		if b.Device != "cpu" {
			t.Fatalf("block %s on %s", b.Block, b.Device)
		}
	}
	_, err = e.devices.GetPlacement(ctx, connect.NewRequest(&controlv1.GetPlacementRequest{ModelId: "nope"}))
	wantCode(t, "placement of an unknown model", err, connect.CodeNotFound)
	_, err = e.devices.PlaceModel(ctx, connect.NewRequest(&controlv1.PlaceModelRequest{ModelId: "stories", Device: "tpu"}))
	wantCode(t, "unknown device", err, connect.CodeInvalidArgument)
	_, err = e.devices.PlaceModel(ctx, connect.NewRequest(&controlv1.PlaceModelRequest{ModelId: "nope", Device: "cpu"}))
	wantCode(t, "move an unknown model", err, connect.CodeNotFound)
	same, err := e.devices.PlaceModel(ctx, connect.NewRequest(&controlv1.PlaceModelRequest{ModelId: "stories", Device: "cpu"}))
	if err != nil || same.Msg.Placement.Device != "cpu" {
		t.Fatalf("placing on its own device: %v %v", same, err)
	}
	resp, err := e.hs.Client().Get(e.hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `jitllm_requests_total{endpoint="control",status="200"}`) {
		t.Error("control-plane calls are not counted in jitllm_requests_total")
	}
	if hasCUDA(devs.Msg.Devices) {
		t.Log("a CUDA device is present: the cpu <-> cuda move runs in TestPlaceCUDA")
		return
	}
	_, err = e.devices.PlaceModel(ctx, connect.NewRequest(&controlv1.PlaceModelRequest{ModelId: "stories", Device: "cuda"}))
	wantCode(t, "cuda without a GPU", err, connect.CodeFailedPrecondition)
	if code, _ := e.chat(t, "stories", "", user("Once upon a time"), 4); code != 200 {
		t.Fatalf("a refused move broke the model: %d", code)
	}
}

func hasCUDA(devs []*controlv1.Device) bool {
	for _, d := range devs {
		if d.Kind == "cuda" && len(d.Backends) > 0 {
			return true
		}
	}
	return false
}

// TestPlaceCUDA moves a model to the GPU and back, with the same greedy
// text on both.
func TestPlaceCUDA(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	devs, err := e.devices.ListDevices(ctx, connect.NewRequest(&controlv1.ListDevicesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if !hasCUDA(devs.Msg.Devices) {
		t.Skip("no CUDA device with a backend on this machine")
	}
	_, want := e.chat(t, "stories", "", user("Once upon a time"), 16)
	for _, dev := range []string{"cuda", "cpu"} {
		pl, err := e.devices.PlaceModel(ctx, connect.NewRequest(&controlv1.PlaceModelRequest{ModelId: "stories", Device: dev}))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(pl.Msg.Placement.Device, dev) || pl.Msg.Model.Device != dev {
			t.Fatalf("placed on %v", pl.Msg)
		}
		if code, got := e.chat(t, "stories", "", user("Once upon a time"), 16); code != 200 || got != want {
			t.Fatalf("on %s: %d %q, want %q", dev, code, got, want)
		}
	}
}

func TestSessionsParkResume(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	create := func() string {
		r, err := e.sessions.CreateSession(ctx, connect.NewRequest(&controlv1.CreateSessionRequest{ModelId: "stories"}))
		if err != nil {
			t.Fatal(err)
		}
		if r.Msg.Session.State != controlv1.SessionState_SESSION_STATE_ACTIVE || r.Msg.Session.ModelId != "stories" {
			t.Fatalf("created %v", r.Msg.Session)
		}
		return r.Msg.Session.Id
	}
	get := func(id string) *controlv1.Session {
		r, err := e.sessions.GetSession(ctx, connect.NewRequest(&controlv1.GetSessionRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.Session
	}
	parked, kept := create(), create()
	turn1 := user("Once upon a time")
	var replies [2]string
	for i, id := range []string{parked, kept} {
		code, text := e.chat(t, "stories", id, turn1, 24)
		if code != 200 || text == "" {
			t.Fatalf("turn 1 on %s: %d %q", id, code, text)
		}
		replies[i] = text
	}
	if replies[0] != replies[1] {
		t.Fatalf("greedy turn 1 differs between sessions: %q vs %q", replies[0], replies[1])
	}
	s := get(parked)
	if s.Tokens <= 0 || s.Bytes <= 0 || s.State != controlv1.SessionState_SESSION_STATE_ACTIVE {
		t.Fatalf("after turn 1: %v", s)
	}

	// Park: the slot goes back to the pool (two other requests can run
	// side by side now), the KV goes to host memory.
	pr, err := e.sessions.ParkSession(ctx, connect.NewRequest(&controlv1.ParkSessionRequest{Id: parked}))
	if err != nil {
		t.Fatal(err)
	}
	if p := pr.Msg.Session; p.State != controlv1.SessionState_SESSION_STATE_PARKED || p.Tokens != s.Tokens || p.Bytes < s.Bytes {
		t.Fatalf("parked %v, active was %v", p, s)
	}
	info, _ := e.models.ListModels(ctx, connect.NewRequest(&controlv1.ListModelsRequest{}))
	if m := info.Msg.Models[0]; m.SlotsInUse != 1 || m.Sessions != 2 {
		t.Fatalf("with one session parked: %d slots in use, %d sessions", m.SlotsInUse, m.Sessions)
	}
	if code, _ := e.chat(t, "stories", "", user("Lily"), 8); code != 200 {
		t.Fatalf("a stateless request beside the sessions: %d", code)
	}
	rr, err := e.sessions.ResumeSession(ctx, connect.NewRequest(&controlv1.ResumeSessionRequest{Id: parked}))
	if err != nil {
		t.Fatal(err)
	}
	if r := rr.Msg.Session; r.State != controlv1.SessionState_SESSION_STATE_ACTIVE || r.Tokens != s.Tokens {
		t.Fatalf("resumed %v", r)
	}

	// Turn 2 continues the conversation: the same text whether or not the
	// session was parked in between.
	turn2 := append(append([]map[string]string{}, turn1...), map[string]string{"role": "assistant", "content": replies[0]}, map[string]string{"role": "user", "content": "And then?"})
	var next [2]string
	for i, id := range []string{parked, kept} {
		code, text := e.chat(t, "stories", id, turn2, 24)
		if code != 200 {
			t.Fatalf("turn 2 on %s: %d %q", id, code, text)
		}
		next[i] = text
	}
	if next[0] != next[1] {
		t.Fatalf("turn 2 after park/resume %q, without %q", next[0], next[1])
	}
	if g := get(parked); g.Tokens <= s.Tokens {
		t.Fatalf("turn 2 left %d tokens, turn 1 %d", g.Tokens, s.Tokens)
	}
	// A parked session resumes by itself on its next turn.
	if _, err := e.sessions.ParkSession(ctx, connect.NewRequest(&controlv1.ParkSessionRequest{Id: kept})); err != nil {
		t.Fatal(err)
	}
	if code, text := e.chat(t, "stories", kept, turn2, 24); code != 200 || text != next[1] {
		t.Fatalf("turn 2 again on a parked session: %d %q, want %q", code, text, next[1])
	}
	if g := get(kept); g.State != controlv1.SessionState_SESSION_STATE_ACTIVE {
		t.Fatalf("after a turn on a parked session: %v", g)
	}

	list, err := e.sessions.ListSessions(ctx, connect.NewRequest(&controlv1.ListSessionsRequest{ModelId: "stories"}))
	if err != nil || len(list.Msg.Sessions) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := e.sessions.DeleteSession(ctx, connect.NewRequest(&controlv1.DeleteSessionRequest{Id: parked})); err != nil {
		t.Fatal(err)
	}
	_, err = e.sessions.GetSession(ctx, connect.NewRequest(&controlv1.GetSessionRequest{Id: parked}))
	wantCode(t, "get a deleted session", err, connect.CodeNotFound)
	if code, _ := e.chat(t, "stories", parked, turn1, 4); code != 404 {
		t.Fatalf("chat on a deleted session: %d", code)
	}
	// Unloading the model deletes its sessions and frees their slots.
	un, err := e.models.UnloadModel(ctx, connect.NewRequest(&controlv1.UnloadModelRequest{Id: "stories"}))
	if err != nil || un.Msg.DeletedSessions != 1 {
		t.Fatalf("unload: %v %v", un, err)
	}
	_, err = e.sessions.GetSession(ctx, connect.NewRequest(&controlv1.GetSessionRequest{Id: kept}))
	wantCode(t, "session of an unloaded model", err, connect.CodeNotFound)
}

func TestSessionsBadInput(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	_, err := e.sessions.CreateSession(ctx, connect.NewRequest(&controlv1.CreateSessionRequest{ModelId: "nope"}))
	wantCode(t, "create on an unknown model", err, connect.CodeNotFound)
	_, err = e.sessions.CreateSession(ctx, connect.NewRequest(&controlv1.CreateSessionRequest{}))
	wantCode(t, "create without a model", err, connect.CodeInvalidArgument)
	for name, call := range map[string]func() error{
		"get": func() error {
			_, err := e.sessions.GetSession(ctx, connect.NewRequest(&controlv1.GetSessionRequest{Id: "nope"}))
			return err
		},
		"park": func() error {
			_, err := e.sessions.ParkSession(ctx, connect.NewRequest(&controlv1.ParkSessionRequest{Id: "nope"}))
			return err
		},
		"resume": func() error {
			_, err := e.sessions.ResumeSession(ctx, connect.NewRequest(&controlv1.ResumeSessionRequest{Id: "nope"}))
			return err
		},
		"delete": func() error {
			_, err := e.sessions.DeleteSession(ctx, connect.NewRequest(&controlv1.DeleteSessionRequest{Id: "nope"}))
			return err
		},
	} {
		wantCode(t, name+" of an unknown session", call(), connect.CodeNotFound)
	}
	if code, body := e.chat(t, "stories", "nope", user("x"), 2); code != 404 || !strings.Contains(body, "no session") {
		t.Fatalf("chat on an unknown session: %d %s", code, body)
	}

	// The one slot is the session's: a second session cannot get one.
	r, err := e.sessions.CreateSession(ctx, connect.NewRequest(&controlv1.CreateSessionRequest{ModelId: "stories"}))
	if err != nil {
		t.Fatal(err)
	}
	id := r.Msg.Session.Id
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = e.sessions.CreateSession(short, connect.NewRequest(&controlv1.CreateSessionRequest{ModelId: "stories"}))
	wantCode(t, "a session beyond the slots", err, connect.CodeResourceExhausted)
	// Parked, it frees the slot for another.
	if _, err := e.sessions.ParkSession(ctx, connect.NewRequest(&controlv1.ParkSessionRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	r2, err := e.sessions.CreateSession(ctx, connect.NewRequest(&controlv1.CreateSessionRequest{ModelId: "stories"}))
	if err != nil {
		t.Fatal(err)
	}
	// ... and resuming the first now waits for a slot, then gives up.
	_, err = e.sessions.ResumeSession(short, connect.NewRequest(&controlv1.ResumeSessionRequest{Id: id}))
	wantCode(t, "resume with no free slot", err, connect.CodeResourceExhausted)
	if _, err := e.sessions.DeleteSession(ctx, connect.NewRequest(&controlv1.DeleteSessionRequest{Id: r2.Msg.Session.Id})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.sessions.ResumeSession(ctx, connect.NewRequest(&controlv1.ResumeSessionRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	if code, body := e.chat(t, "stories", id, user("Once"), 4); code != 200 {
		t.Fatalf("chat on the resumed session: %d %s", code, body)
	}
	// A session runs one request at a time, and only on its own model.
	if code, body := e.chat(t, "other", id, user("Once"), 4); code != 404 {
		t.Fatalf("chat on an unknown model: %d %s", code, body)
	}
}

// A session runs one request at a time: while a stream runs on it, other
// requests and park / delete are refused, and it shows as busy. The
// Anthropic endpoint runs on sessions too.
func TestSessionBusyAndAnthropic(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	r, err := e.sessions.CreateSession(ctx, connect.NewRequest(&controlv1.CreateSessionRequest{ModelId: "stories"}))
	if err != nil {
		t.Fatal(err)
	}
	id := r.Msg.Session.Id
	body := e.streamOn(t, id, 400)
	if code, msg := e.chat(t, "stories", id, user("x"), 2); code != 409 || !strings.Contains(msg, "running a request") {
		t.Fatalf("a second request on a busy session: %d %s", code, msg)
	}
	g, _ := e.sessions.GetSession(ctx, connect.NewRequest(&controlv1.GetSessionRequest{Id: id}))
	if g.Msg.Session.State != controlv1.SessionState_SESSION_STATE_BUSY {
		t.Fatalf("while streaming: %v", g.Msg.Session)
	}
	_, err = e.sessions.ParkSession(ctx, connect.NewRequest(&controlv1.ParkSessionRequest{Id: id}))
	wantCode(t, "park a busy session", err, connect.CodeFailedPrecondition)
	_, err = e.sessions.DeleteSession(ctx, connect.NewRequest(&controlv1.DeleteSessionRequest{Id: id}))
	wantCode(t, "delete a busy session", err, connect.CodeFailedPrecondition)
	if rest, _ := io.ReadAll(body); !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream's end: %q", tail(string(rest)))
	}
	g, _ = e.sessions.GetSession(ctx, connect.NewRequest(&controlv1.GetSessionRequest{Id: id}))
	if g.Msg.Session.State != controlv1.SessionState_SESSION_STATE_ACTIVE || g.Msg.Session.Tokens == 0 {
		t.Fatalf("after the stream: %v", g.Msg.Session)
	}

	req, _ := http.NewRequest("POST", e.hs.URL+"/v1/messages", strings.NewReader(`{"model":"stories","max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"Lily"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.SessionHeader, id)
	resp, err := e.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"text"`) {
		t.Fatalf("anthropic on a session: %d %s", resp.StatusCode, b)
	}
	req, _ = http.NewRequest("POST", e.hs.URL+"/v1/messages", strings.NewReader(`{"model":"stories","max_tokens":8,"messages":[{"role":"user","content":"Lily"}]}`))
	req.Header.Set(server.SessionHeader, "nope")
	resp, err = e.hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("anthropic on an unknown session: %d", resp.StatusCode)
	}
}
