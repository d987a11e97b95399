package gpuexec

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every module the runner would load assembles with NVIDIA's ptxas where
// one is installed (a CUDA toolkit; the runner itself never needs it): the
// plan of each test model at 64 prefill rows rendered as bind renders it
// for sm_80 (tensor-core products, no dependent launches) and sm_90 (the
// decode kernels rendered for dependent launches). The driver's own JIT
// checks the same at load on a GPU; this catches a PTX error on a machine
// without one.
func TestKernelsAssemble(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("no ptxas on PATH (a CUDA toolkit's; Debian: nvidia-cuda-toolkit): the rendered PTX is checked by the driver on a GPU")
	}
	ver, _ := exec.Command(ptxas, "--version").Output()
	dir := t.TempDir()
	for _, name := range models {
		m := loadModel(t, name)
		p, err := newPlanTiles(m, 128, 64, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, cc := range [][2]int{{8, 0}, {9, 0}} {
			src, ks, _, _, err := render(p, cc[0], cc[1], cc[0] >= 9)
			if err != nil {
				t.Fatalf("%s sm_%d%d: %v", name, cc[0], cc[1], err)
			}
			arch := "sm_" + string(rune('0'+cc[0])) + string(rune('0'+cc[1]))
			in := filepath.Join(dir, strings.ReplaceAll(filepath.Base(name), ".", "_")+"-"+arch+".ptx")
			if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cmd := exec.Command(ptxas, "-arch="+arch, "-o", in+".cubin", in)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s %s: ptxas: %v\n%s", name, arch, err, out.String())
			}
			if cc[0] >= 9 && !strings.Contains(src, "griddepcontrol.wait") {
				t.Fatalf("%s %s: no kernel rendered for dependent launches", name, arch)
			}
			t.Logf("%s %s: %d kernels, %d bytes of PTX assembled", name, arch, len(ks), len(src))
		}
	}
	t.Logf("%s", bytes.TrimSpace(ver))
}
