package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve answers, and on shutdown lets an in-flight stream finish before
// it returns.
func TestServeGracefulShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, []string{"-addr", "127.0.0.1:0", "-load", "../../testdata/stories260K.gguf", "-id", "stories", "-threads", "1", "-grace", "120s"}, pw, io.Discard)
		pw.Close()
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
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"stories","prompt":"Once upon a time","max_tokens":64,"temperature":0,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Shut down while the stream is in flight.
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("in-flight stream cut short: %q", rest)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return")
	}
	if _, err := http.Get(url + "/v1/models"); err == nil {
		t.Error("still accepting after shutdown")
	}
}

// -cache-type is checked before anything loads, and against the device and
// the model when one does.
func TestServeCacheType(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-cache-type", "q4_0"}, `-cache-type "q4_0": want f16 or q8_0`},
		{[]string{"-cache-type", "q8_0", "-devices", "cuda"}, "f16 KV cache"},
		{[]string{"-cache-type", "q8_0"}, "head dim"}, // stories260K's are 8 values
	} {
		args := append([]string{"-addr", "127.0.0.1:0", "-load", "../../testdata/stories260K.gguf", "-threads", "1", "-control=false"}, c.args...)
		err := serve(context.Background(), args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}
