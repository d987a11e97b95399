package server

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
)

var embeddingFields = set("model", "input", "encoding_format", "dimensions", "user")

// maxEmbeddingInputs and maxEmbeddingTokens bound one request, as OpenAI
// does (2048 inputs, 300k tokens in all).
const (
	maxEmbeddingInputs = 2048
	maxEmbeddingTokens = 300_000
)

// handleEmbeddings answers OpenAI's /v1/embeddings for a generative model:
// each input's final hidden state (the output head's input, after the final
// norm), mean-pooled over its tokens and scaled to unit length; with
// dimensions, the first dimensions values, scaled to unit length again.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	obj, e := readObject(r, embeddingFields)
	if e != nil {
		writeOpenAIError(w, e)
		return
	}
	var id string
	if _, e := field(obj, "model", &id); e != nil {
		writeOpenAIError(w, e)
		return
	}
	if id == "" {
		writeOpenAIError(w, badRequest("model", "the field \"model\" is required"))
		return
	}
	m, ok := s.model(id)
	if !ok {
		writeOpenAIError(w, notFound(id))
		return
	}
	format := "float"
	if _, e := field(obj, "encoding_format", &format); e != nil {
		writeOpenAIError(w, e)
		return
	}
	if format != "float" && format != "base64" {
		writeOpenAIError(w, badRequest("encoding_format", "encoding_format must be \"float\" or \"base64\", got %q", format))
		return
	}
	width, err := embedWidth(m)
	if err != nil {
		writeOpenAIError(w, &apiError{status: http.StatusBadRequest, kind: "invalid_request", param: "model", msg: err.Error()})
		return
	}
	dims := width
	if ok, e := field(obj, "dimensions", &dims); e != nil {
		writeOpenAIError(w, e)
		return
	} else if ok && (dims < 1 || dims > width) {
		writeOpenAIError(w, badRequest("dimensions", "dimensions must be in [1, %d] (the model's hidden size)", width))
		return
	}
	var user string
	if _, e := field(obj, "user", &user); e != nil {
		writeOpenAIError(w, e)
		return
	}
	inputs, e := s.embeddingInputs(m, obj["input"])
	if e != nil {
		writeOpenAIError(w, e)
		return
	}

	ctx := r.Context()
	sess, err := m.pool.acquire(ctx)
	if err != nil {
		if ctx.Err() == nil {
			writeOpenAIError(w, asAPIError(err))
		}
		return
	}
	defer m.pool.release(sess)
	ctx, unbind := m.bind(ctx) // an unload cancels it after its grace period
	defer unbind()
	longest := 0
	for _, ids := range inputs {
		longest = max(longest, len(ids))
	}
	m.pool.reserve(sess, longest)

	data := make([]any, len(inputs))
	total := 0
	for i, ids := range inputs {
		v, err := sess.Embed(ctx, ids)
		if err != nil {
			if ctx.Err() == nil {
				writeOpenAIError(w, asAPIError(m.lifeErr(err)))
			}
			return
		}
		v = unit(v[:dims])
		total += len(ids)
		var emb any = v
		if format == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	s.metrics.tokensIn.WithLabelValues(m.id).Add(float64(total))
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": m.id,
		"usage": map[string]int{"prompt_tokens": total, "total_tokens": total}})
}

// unit scales v to length 1 (a zero vector stays zero).
func unit(v []float32) []float32 {
	var sq float64
	for _, x := range v {
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return v
	}
	inv := 1 / math.Sqrt(sq)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return v
}

// embeddingInputs decodes input: a string, an array of strings, an array
// of token ids, or an array of arrays of token ids; each is tokenized (BOS
// and EOS by the vocabulary's rules) and must fit the context.
func (s *Server) embeddingInputs(m *model, raw json.RawMessage) ([][]int32, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "the field \"input\" is required")
	}
	// Each shape into its own variable: a failed Unmarshal fills what it can.
	var texts []string
	var lists [][]int32
	var one string
	var strs []string
	var ids []int32
	var idLists [][]int32
	switch {
	case json.Unmarshal(raw, &one) == nil:
		texts = []string{one}
	case json.Unmarshal(raw, &strs) == nil:
		texts = strs
	case json.Unmarshal(raw, &ids) == nil:
		lists = [][]int32{ids}
	case json.Unmarshal(raw, &idLists) == nil:
		lists = idLists
	default:
		return nil, badRequest("input", "input must be a string, an array of strings, an array of token ids, or an array of arrays of token ids")
	}
	if n := len(texts) + len(lists); n == 0 || n > maxEmbeddingInputs {
		return nil, badRequest("input", "input must hold 1 to %d inputs, got %d", maxEmbeddingInputs, n)
	}
	tok := m.m.Tok
	for i, t := range texts {
		if t == "" {
			return nil, badRequest("input", "input[%d] is empty", i)
		}
		ids, err := tok.Encode(t, true, false)
		if err != nil {
			return nil, badRequest("input", "tokenizing input[%d]: %v", i, err)
		}
		lists = append(lists, ids)
	}
	limit, total := m.pool.context(), 0
	for i, ids := range lists {
		if total += len(ids); total > maxEmbeddingTokens {
			return nil, badRequest("input", "the inputs are over %d tokens in all", maxEmbeddingTokens)
		}
		if len(ids) == 0 {
			return nil, badRequest("input", "input[%d] has no tokens", i)
		}
		if len(ids) > limit {
			return nil, badRequest("input", "%v: input[%d] is %d tokens and the context is %d tokens", errContext, i, len(ids), limit)
		}
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				return nil, badRequest("input", "input[%d]: token id %d is outside the vocabulary", i, id)
			}
		}
	}
	return lists, nil
}

// embedWidth is the size of the model's embeddings: its hidden state.
func embedWidth(m *model) (int, error) {
	g := m.m.Exec.Graph
	out := g.Nodes[g.Outputs["logits"]]
	if len(out.In) == 0 {
		return 0, fmt.Errorf("the model %q has no hidden state to embed", m.id)
	}
	return g.Nodes[out.In[0]].Cols, nil
}
