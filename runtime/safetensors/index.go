package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// maxIndex bounds model.safetensors.index.json. Real indexes are a few
// hundred KiB even for the largest models; anything past this is not one.
const maxIndex = 64 << 20

// ReadIndex reads a sharded checkpoint's model.safetensors.index.json: the
// weight_map (tensor name -> shard file name, a plain base name).
//
// Shard names are joined to the checkpoint directory by callers, so a name
// that could reach outside it (a separator, "..") is rejected here.
func ReadIndex(path string) (map[string]string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	// Read one byte past the limit instead of trusting Stat, which says
	// nothing useful for pipes and special files.
	b, err := io.ReadAll(io.LimitReader(fh, maxIndex+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: index %s: %w", path, err)
	}
	if len(b) > maxIndex {
		return nil, fmt.Errorf("safetensors: index %s: larger than %d bytes", path, maxIndex)
	}
	m, err := parseIndex(b)
	if err != nil {
		return nil, fmt.Errorf("safetensors: index %s: %w", path, err)
	}
	return m, nil
}

// parseIndex walks the top-level object as tokens so a duplicated
// "weight_map" or tensor entry is an error rather than last-wins.
func parseIndex(b []byte) (map[string]string, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var wm map[string]string
	seen := map[string]bool{}
	for dec.More() {
		key, err := readKey(dec)
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		if key != "weight_map" {
			// "metadata" (total_size and the like) and any other keys are
			// not ours to interpret; skip them whole.
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			continue
		}
		if wm, err = readStringMap(dec); err != nil {
			return nil, fmt.Errorf("weight_map: %w", err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	if wm == nil {
		return nil, errors.New("no weight_map")
	}
	if len(wm) == 0 {
		return nil, errors.New("weight_map is empty")
	}
	for name, shard := range wm {
		if name == "" {
			return nil, errors.New("weight_map: empty tensor name")
		}
		if err := checkShardName(shard); err != nil {
			return nil, fmt.Errorf("weight_map: tensor %q: %w", name, err)
		}
	}
	return wm, nil
}

// checkShardName accepts only a plain file name, so joining it to the
// checkpoint directory cannot escape that directory.
func checkShardName(s string) error {
	switch {
	case s == "":
		return errors.New("empty shard name")
	case s == ".":
		return fmt.Errorf("shard name %q is not a file name", s)
	case strings.ContainsAny(s, `/\`+string(os.PathSeparator)) || strings.Contains(s, ".."):
		return fmt.Errorf("shard name %q must be a plain file name", s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("shard name %q contains NUL", s)
	}
	return nil
}
