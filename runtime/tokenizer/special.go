package tokenizer

import (
	"sort"
	"strings"
)

// Token texts llama.cpp recognises by name because converters often leave
// them typed as normal tokens. Each found one is forced to control.
var (
	eotTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
		"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eomTexts    = []string{"<|eom_id|>"}
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}
	fimSepTexts = []string{"<|file_sep|>"}
	eogTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
		"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
		"<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["}
)

// find returns the lowest id whose text is in texts (llama.cpp walks a hash
// map, so its pick among several is arbitrary; lowest id is deterministic).
func (t *Tokenizer) find(texts []string) int32 {
	best := null
	for _, s := range texts {
		if id, ok := t.toID[s]; ok && (best == null || id < best) {
			best = id
		}
	}
	return best
}

func (t *Tokenizer) forceControl(id int32) {
	if id >= 0 {
		t.attrs[id] |= attrControl
	}
}

func (t *Tokenizer) detectSpecial(name, pre string) {
	if t.eot == null {
		t.eot = t.find(eotTexts)
		t.forceControl(t.eot)
	}
	if t.eom == null {
		t.eom = t.find(eomTexts)
		t.forceControl(t.eom)
	}
	// Of the FIM tokens, pad, repo and file-separator also end generation.
	var fimEOG []int32
	for i, l := range [][]string{fimPreTexts, fimSufTexts, fimMidTexts, fimPadTexts, fimRepTexts, fimSepTexts} {
		id := t.find(l)
		t.forceControl(id)
		if id >= 0 && i >= 3 {
			fimEOG = append(fimEOG, id)
		}
	}
	t.eog = map[int32]bool{}
	for _, id := range fimEOG {
		t.eog[id] = true
	}
	for _, s := range eogTexts {
		if id, ok := t.toID[s]; ok {
			t.eog[id] = true
			t.forceControl(id)
		}
	}
	// gpt-oss: these must always render.
	for _, s := range []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"} {
		if id, ok := t.toID[s]; ok {
			t.attrs[id] = attrUser
		}
	}
	for _, id := range []int32{t.eos, t.eot, t.eom} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	// o200k_harmony / solar-open: <|end|> separates messages there.
	has := func(s string) bool { id, ok := t.toID[s]; return ok && t.eog[id] }
	if id, ok := t.toID["<|end|>"]; ok && t.eog[id] &&
		((has("<|return|>") && (has("<|call|>") || has("<|calls|>"))) || (has("<|calls|>") && has("<|flush|>"))) {
		delete(t.eog, id)
		t.attrs[id] = attrUser
	}
	if id, ok := t.toID["</s>"]; ok && t.eog[id] && has("<|tool_response>") {
		delete(t.eog, id)
		t.attrs[id] = attrNormal
	}

	for id, a := range t.attrs {
		if a&(attrControl|attrUser|attrUnknown) != 0 {
			t.special = append(t.special, int32(id))
		}
	}
	sort.SliceStable(t.special, func(i, j int) bool {
		return len(t.tokens[t.special[i]]) > len(t.tokens[t.special[j]])
	})

	setAttr := func(s string, a attr, on bool) {
		if id, ok := t.toID[s]; ok {
			if on {
				t.attrs[id] |= a
			} else {
				t.attrs[id] &^= a
			}
		}
	}
	switch {
	case strings.Contains(pre, "jina-v2-de") || strings.Contains(pre, "jina-v2-es") || strings.Contains(pre, "jina-v2-code"):
		setAttr("<mask>", attrLStrip, true)
	case strings.Contains(name, "phi-3") || strings.Contains(name, "phi3"):
		for _, id := range t.special {
			t.attrs[id] |= attrRStrip
		}
		setAttr("</s>", attrRStrip, true)
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			setAttr(s, attrRStrip, false)
		}
	case strings.Contains(name, "modern-bert"):
		setAttr("[MASK]", attrLStrip, true)
	}
}

// fragment is a run of raw text [start,end) or, when tok >= 0, one token.
type fragment struct {
	tok        int32
	start, end int
}

func isCSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

// partition splits text at special-token occurrences, longest tokens first,
// like llama.cpp's tokenizer_st_partition.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{tok: null, start: 0, end: len(text)}}
	var next []fragment
	for _, id := range t.special {
		a := t.attrs[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		s := t.tokens[id]
		if !containsRaw(text, frags, s) {
			continue
		}
		next = next[:0]
		for _, f := range frags {
			if f.tok != null {
				next = append(next, f)
				continue
			}
			start, end := f.start, f.end
			for start < end {
				i := strings.Index(text[start:end], s)
				if i < 0 {
					break
				}
				m := start + i
				l := m
				if a&attrLStrip != 0 {
					for l > start && isCSpace(text[l-1]) {
						l--
					}
				}
				if l > start {
					next = append(next, fragment{tok: null, start: start, end: l})
				}
				next = append(next, fragment{tok: id, start: m, end: m + len(s)})
				start = m + len(s)
				if a&attrRStrip != 0 {
					for start < end && isCSpace(text[start]) {
						start++
					}
				}
			}
			if start < end {
				next = append(next, fragment{tok: null, start: start, end: end})
			}
		}
		frags, next = next, frags
	}
	return frags
}

func containsRaw(text string, frags []fragment, s string) bool {
	for _, f := range frags {
		if f.tok == null && strings.Contains(text[f.start:f.end], s) {
			return true
		}
	}
	return false
}
