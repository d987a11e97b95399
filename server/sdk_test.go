package server

import (
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func openaiClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("test"), option.WithMaxRetries(0))
}

// The official OpenAI SDK, as a user would drive it: greedy completions
// reproduce llama.cpp's text, streamed or not.
func TestOpenAISDKCompletions(t *testing.T) {
	_, hs := newTest(t, Config{})
	c := openaiClient(hs.URL)
	for _, r := range refs(t) {
		params := openai.CompletionNewParams{
			Model:       "stories",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(r.Prompt)},
			MaxTokens:   openai.Int(int64(len(r.GeneratedIDs))),
			Temperature: openai.Float(0),
		}
		res, err := c.Completions.New(t.Context(), params)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Choices[0].Text; got != r.GeneratedText {
			t.Errorf("%q:\n got %q\nwant %q", r.Prompt, got, r.GeneratedText)
		}
		if res.Usage.CompletionTokens != int64(len(r.GeneratedIDs)) || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
			t.Errorf("usage %+v", res.Usage)
		}
		if res.Choices[0].FinishReason != "length" {
			t.Errorf("finish_reason %q", res.Choices[0].FinishReason)
		}
		st := c.Completions.NewStreaming(t.Context(), params)
		var b strings.Builder
		finish := ""
		for st.Next() {
			ch := st.Current()
			for _, x := range ch.Choices {
				b.WriteString(x.Text)
				if x.FinishReason != "" {
					finish = string(x.FinishReason)
				}
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if b.String() != r.GeneratedText || finish != "length" {
			t.Errorf("stream %q: got %q (finish %q)", r.Prompt, b.String(), finish)
		}
	}
}

func TestOpenAISDKChat(t *testing.T) {
	_, hs := newTest(t, Config{})
	c := openaiClient(hs.URL)
	params := openai.ChatCompletionNewParams{
		Model:       "stories",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Tell a story."), openai.UserMessage("Once upon a time")},
		MaxTokens:   openai.Int(24),
		Temperature: openai.Float(0),
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(3),
	}
	res, err := c.Chat.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	ch := res.Choices[0]
	if ch.Message.Role != "assistant" || ch.Message.Content == "" || ch.FinishReason != "length" {
		t.Fatalf("choice %+v", ch)
	}
	if res.Usage.CompletionTokens != 24 || res.Usage.PromptTokens == 0 {
		t.Errorf("usage %+v", res.Usage)
	}
	var joined strings.Builder
	for _, lp := range ch.Logprobs.Content {
		joined.WriteString(lp.Token)
		if lp.Logprob > 0 || len(lp.TopLogprobs) != 3 {
			t.Fatalf("logprob %+v", lp)
		}
		// Greedy: the chosen token is the most likely one.
		if lp.TopLogprobs[0].Token != lp.Token || lp.TopLogprobs[0].Logprob != lp.Logprob {
			t.Errorf("greedy token %q is not the top alternative %+v", lp.Token, lp.TopLogprobs[0])
		}
		if lp.TopLogprobs[1].Logprob > lp.TopLogprobs[0].Logprob {
			t.Errorf("top_logprobs out of order: %+v", lp.TopLogprobs)
		}
	}
	if len(ch.Logprobs.Content) != 24 || joined.String() != ch.Message.Content {
		t.Errorf("logprob tokens %q (%d) vs content %q", joined.String(), len(ch.Logprobs.Content), ch.Message.Content)
	}

	// Streaming with the SDK's accumulator gives the same message.
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.Chat.Completions.NewStreaming(t.Context(), params)
	acc := openai.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != ch.Message.Content {
		t.Errorf("stream %q, non-stream %q", got, ch.Message.Content)
	}
	if acc.Usage.CompletionTokens != 24 {
		t.Errorf("stream usage %+v", acc.Usage)
	}

	models, err := c.Models.List(t.Context())
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "stories" {
		t.Errorf("models %+v %v", models, err)
	}
	if _, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "nope", Messages: params.Messages}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown model: %v", err)
	}
}

func TestAnthropicSDK(t *testing.T) {
	_, hs := newTest(t, Config{})
	c := anthropic.NewClient(aoption.WithBaseURL(hs.URL), aoption.WithAPIKey("test"), aoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model:     "stories",
		MaxTokens: 20,
		System:    []anthropic.TextBlockParam{{Text: "Tell a story."}},
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Once upon a time"))},
	}
	// This SDK version has no temperature field; set it as a raw JSON field.
	greedy := aoption.WithJSONSet("temperature", 0)
	msg, err := c.Messages.New(t.Context(), params, greedy)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text == "" || msg.StopReason != "max_tokens" || msg.Usage.OutputTokens != 20 || msg.Usage.InputTokens == 0 {
		t.Fatalf("message %+v", msg)
	}
	text := msg.Content[0].Text

	st := c.Messages.NewStreaming(t.Context(), params, greedy)
	acc := anthropic.Message{}
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Content) != 1 || acc.Content[0].Text != text || acc.StopReason != "max_tokens" || acc.Usage.OutputTokens != 20 {
		t.Errorf("streamed %+v, want text %q", acc, text)
	}

	// A stop sequence taken from the greedy text ends it there.
	words := strings.Fields(text)
	stop := words[len(words)/2]
	params.StopSequences = []string{stop}
	msg, err = c.Messages.New(t.Context(), params, greedy)
	if err != nil {
		t.Fatal(err)
	}
	want := text[:strings.Index(text, stop)]
	if msg.Content[0].Text != want || msg.StopReason != "stop_sequence" || msg.StopSequence != stop {
		t.Errorf("stop %q: got %q (%s %q), want %q", stop, msg.Content[0].Text, msg.StopReason, msg.StopSequence, want)
	}

	_, err = c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "nope", MaxTokens: 5, Messages: params.Messages})
	if err == nil || !strings.Contains(err.Error(), "not_found_error") {
		t.Errorf("unknown model: %v", err)
	}
}
