package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/jitllm/jitllm/runtime/gguf"
	"github.com/jitllm/jitllm/runtime/jlm"
	"github.com/jitllm/jitllm/runtime/meta"
	"github.com/jitllm/jitllm/runtime/weights"
)

func init() {
	root.AddCommand(&cobra.Command{
		Use:   "inspect FILE [-json] [-verify] [-meta-all]",
		Short: "show a GGUF or .jlm file's architecture, parameters, tensors and metadata",
		Long: `inspect prints what a GGUF or .jlm file holds: format, architecture, parameter
count, size, every tensor (name, type, shape, bytes) and the metadata, with long
arrays and strings abbreviated.

  -json       the same as JSON
  -verify     check every tensor's CRC-32C (.jlm); exits non-zero on a mismatch
  -meta-all   print metadata in full, long token lists included`,
		DisableFlagsInUseLine: true,
		DisableFlagParsing:    true, // std flag syntax: -json or --json, anywhere
		RunE: func(c *cobra.Command, args []string) error {
			err := runInspect(c.OutOrStdout(), args)
			if errors.Is(err, flag.ErrHelp) {
				return c.Help()
			}
			return err
		},
	})
}

type inspectOpts struct{ json, verify, all bool }

// abbrevLen is how many array elements or string bytes are shown before
// abbreviating.
const (
	abbrevLen    = 8
	abbrevString = 160
)

func runInspect(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o inspectOpts
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.BoolVar(&o.verify, "verify", false, "check tensor checksums")
	fs.BoolVar(&o.all, "meta-all", false, "print metadata in full")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("inspect takes one FILE, got %d arguments (see jitllm inspect -h)", len(pos))
	}
	src, err := weights.Open(pos[0])
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := os.Stat(pos[0])
	if err != nil {
		return err
	}
	r := describeSource(pos[0], st.Size(), src, o)
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.text(w, src.Meta(), o)
	}
	if r.Verify != nil && len(r.Verify.Failed) > 0 {
		return fmt.Errorf("%s: %d of %d tensors failed verification (file corrupted; re-convert it)", pos[0], len(r.Verify.Failed), r.Verify.Checked)
	}
	return nil
}

// inspectReport is what inspect shows; its JSON form is -json's output.
type inspectReport struct {
	Path          string          `json:"path"`
	Format        string          `json:"format"`
	FormatVersion uint32          `json:"format_version"`
	Alignment     int64           `json:"alignment"`
	Size          int64           `json:"size"`
	Architecture  string          `json:"architecture"`
	Parameters    int64           `json:"parameters"`
	TensorBytes   int64           `json:"tensor_bytes"`
	Metadata      map[string]any  `json:"metadata"`
	Tensors       []inspectTensor `json:"tensors"`
	Verify        *inspectVerify  `json:"verify,omitempty"`
}

type inspectTensor struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Shape   []int64 `json:"shape"`
	Bytes   int64   `json:"bytes"`
	Offset  int64   `json:"offset"`
	CRC32C  *uint32 `json:"crc32c,omitempty"`
	Experts int     `json:"experts,omitempty"`
}

type inspectVerify struct {
	Checksums bool     `json:"checksums"` // false for GGUF, which has none
	Checked   int      `json:"checked"`
	Failed    []string `json:"failed"`
}

func describeSource(path string, size int64, src weights.Source, o inspectOpts) *inspectReport {
	r := &inspectReport{Path: path, Format: src.Format(), Size: size, Metadata: map[string]any{}}
	r.Architecture, _ = src.Meta().String("general.architecture")
	for _, kv := range src.Meta().All() {
		r.Metadata[kv.Key] = metaJSON(kv.Value, o.all)
	}
	for _, t := range src.Tensors() {
		r.Parameters += t.Elements()
		r.TensorBytes += t.Size
	}
	switch f := containerFile(src).(type) {
	case *jlm.File:
		r.FormatVersion, r.Alignment = f.Version, f.Alignment
		for i := range f.Tensors {
			t := &f.Tensors[i]
			crc := t.CRC
			r.Tensors = append(r.Tensors, inspectTensor{t.Name, t.Type.String(), t.Dims, t.Size, t.Offset, &crc, len(t.Experts)})
		}
		if o.verify {
			r.Verify = &inspectVerify{Checksums: true, Failed: []string{}}
			for i := range f.Tensors {
				r.Verify.Checked++
				if err := f.Verify(&f.Tensors[i]); err != nil {
					r.Verify.Failed = append(r.Verify.Failed, err.Error())
				}
			}
		}
	case *gguf.File:
		r.FormatVersion, r.Alignment = f.Version, f.Alignment
		for _, t := range f.Tensors {
			r.Tensors = append(r.Tensors, inspectTensor{Name: t.Name, Type: t.Type.String(), Shape: t.Dims, Bytes: t.Size, Offset: t.Offset})
		}
		if o.verify {
			r.Verify = &inspectVerify{Failed: []string{}}
		}
	}
	return r
}

// containerFile returns the container-specific file behind a source.
func containerFile(src weights.Source) any {
	switch s := src.(type) {
	case interface{ File() *jlm.File }:
		return s.File()
	case interface{ File() *gguf.File }:
		return s.File()
	}
	return nil
}

// metaJSON is v as JSON data; arrays longer than abbrevLen become
// {"array": elem, "count": n, "first": [...]} unless all.
func metaJSON(v meta.Value, all bool) any {
	if v.Kind() != meta.Array || all || v.Len() <= abbrevLen {
		return v.JSON()
	}
	first := make([]any, abbrevLen)
	for i := range first {
		first[i] = v.At(i).JSON()
	}
	return map[string]any{"array": v.Elem().String(), "count": v.Len(), "first": first}
}

func (r *inspectReport) text(w io.Writer, md *meta.Map, o inspectOpts) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file:\t%s\n", r.Path)
	fmt.Fprintf(tw, "format:\t%s version %d (alignment %d)\n", r.Format, r.FormatVersion, r.Alignment)
	fmt.Fprintf(tw, "size:\t%d bytes (%s)\n", r.Size, humanBytes(r.Size))
	fmt.Fprintf(tw, "architecture:\t%s\n", orNone(r.Architecture))
	fmt.Fprintf(tw, "parameters:\t%d\n", r.Parameters)
	fmt.Fprintf(tw, "tensors:\t%d (%s)\n", len(r.Tensors), humanBytes(r.TensorBytes))
	tw.Flush()

	fmt.Fprintf(w, "\nmetadata (%d keys):\n", md.Len())
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range md.All() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", kv.Key, metaKind(kv.Value), metaText(kv.Value, o.all))
	}
	tw.Flush()

	if len(r.Tensors) > 0 {
		fmt.Fprintf(w, "\ntensors:\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  name\ttype\tshape\tbytes\n")
		for _, t := range r.Tensors {
			name := t.Name
			if t.Experts > 0 {
				name += fmt.Sprintf(" (%d experts)", t.Experts)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", name, t.Type, shapeString(t.Shape), t.Bytes)
		}
		tw.Flush()
	}
	if v := r.Verify; v != nil {
		switch {
		case !v.Checksums:
			fmt.Fprintf(w, "\nverify: GGUF files carry no checksums, so there is nothing to verify (convert to .jlm to get them)\n")
		case len(v.Failed) == 0:
			fmt.Fprintf(w, "\nverify: %d tensors, all checksums match\n", v.Checked)
		default:
			fmt.Fprintf(w, "\nverify: %d of %d tensors FAILED:\n", len(v.Failed), v.Checked)
			for _, e := range v.Failed {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
	}
}

func metaKind(v meta.Value) string {
	if v.Kind() == meta.Array {
		return fmt.Sprintf("[%d]%s", v.Len(), v.Elem())
	}
	return v.Kind().String()
}

// metaText renders v on one line, abbreviating unless all.
func metaText(v meta.Value, all bool) string {
	if !all {
		s := v.String() // abbreviates arrays
		if len(s) > abbrevString {
			n := abbrevString
			for n > 0 && !utf8.RuneStart(s[n]) {
				n--
			}
			s = s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
		}
		return oneLine(s)
	}
	if v.Kind() != meta.Array {
		return oneLine(v.String())
	}
	parts := make([]string, v.Len())
	for i := range parts {
		parts[i] = metaText(v.At(i), true)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// oneLine keeps tabs and newlines (chat templates) from breaking the table.
func oneLine(s string) string {
	return strings.NewReplacer("\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(s)
}

func shapeString(d []int64) string {
	s := make([]string, len(d))
	for i, x := range d {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
