package exec

import (
	"fmt"
	"math"
	"os"
	"testing"
)

func TestZZDiagStories(t *testing.T) {
	model := os.Getenv("DIAG_MODEL")
	ref := os.Getenv("DIAG_REF")
	if model == "" {
		t.Skip()
	}
	var rf storiesRef
	readJSON(t, ref, &rf)
	r := load(t, model, Options{})
	for pi, res := range rf.Results {
		r.Truncate(0)
		logits, _ := r.Forward(res.PromptTokens)
		line := ""
		for i, st := range res.Steps {
			lp := logSoftmax(logits)
			w := 0.0
			for _, p := range st.Top10 {
				w = math.Max(w, math.Abs(lp[int(p[0])]-p[1]))
			}
			line += fmt.Sprintf("%d:%.1e ", i, w)
			if argmax(logits) != res.GeneratedIDs[i] {
				line += "X "
				break
			}
			if i+1 >= len(res.GeneratedIDs) {
				break
			}
			logits, _ = r.Forward([]int32{res.GeneratedIDs[i]})
		}
		t.Logf("prompt %d (%d tok): %s", pi, len(res.PromptTokens), line)
	}
}
