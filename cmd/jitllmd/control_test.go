package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/jitllm/jitllm/server/control/gen/jitllm/control/v1"
	"github.com/jitllm/jitllm/server/control/gen/jitllm/control/v1/controlv1connect"
)

// serve with -load-dir and no model starts empty; the control plane on the
// same port loads a model, which the HTTP API then serves.
func TestServeControlPlane(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"-addr", "127.0.0.1:0", "-load-dir", "../../testdata", "-threads", "1", "-devices", "cpu"}, pw, io.Discard)
		pw.Close()
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not return")
		}
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("no address in %q", line)
	}
	url := strings.TrimSpace(line[i:])
	models := controlv1connect.NewModelServiceClient(http.DefaultClient, url)
	ld, err := models.LoadModel(ctx, connect.NewRequest(&controlv1.LoadModelRequest{Path: "../../testdata/stories260K.gguf", Id: "stories"}))
	if err != nil {
		t.Fatal(err)
	}
	if ld.Msg.Model.Device != "cpu" || ld.Msg.Model.Family != "llama" {
		t.Fatalf("loaded %v", ld.Msg.Model)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stories","prompt":"Once upon a time","max_tokens":8,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"text"`) {
		t.Fatalf("completion on the loaded model: %d %s", resp.StatusCode, b)
	}
	// Outside the load directories: refused.
	_, err = models.LoadModel(ctx, connect.NewRequest(&controlv1.LoadModelRequest{Path: "/etc/x.gguf"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied && connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("load from /etc: %v", err)
	}
}

func TestServeBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-load", "../../testdata/stories260K.gguf", "-devices", "tpu"}, "unknown device"},
		{[]string{"-load", "../../testdata/stories260K.gguf", "-devices", "cuda:0,cuda:1"}, "one device"},
		{[]string{"-control=false", "-load-dir", "../../testdata"}, "no models"},
		{nil, "no models"},
	} {
		err := serve(context.Background(), append([]string{"-addr", "127.0.0.1:0"}, c.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v, want %q", c.args, err, c.want)
		}
	}
}
