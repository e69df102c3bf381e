package pacer_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildWithoutLibraryExplains builds a copy of this package in a tree
// where libpacer.a was never built: the build must stop with what to do
// (libcheck.go), not with the linker's "cannot find".
func TestBuildWithoutLibraryExplains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package once more")
	}
	root := t.TempDir()
	pkg := filepath.Join(root, "bindings", "go")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		copyFile(t, e.Name(), filepath.Join(pkg, e.Name()))
	}
	if err := os.MkdirAll(filepath.Join(root, "include"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join("..", "..", "include", "pacer.h"), filepath.Join(root, "include", "pacer.h"))

	build := exec.Command("go", "build", "-o", os.DevNull, ".")
	build.Dir = pkg
	// Without the scripts' GOFLAGS: -tags pacer_lib_elsewhere turns the check off.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	build.Env = append(env, "GOTOOLCHAIN=local", "CGO_ENABLED=1")
	out, err := build.CombinedOutput()
	if err == nil {
		t.Fatalf("the build without libpacer.a succeeded:\n%s", out)
	}
	for _, want := range []string{"libpacer.a is not built", "go generate", "pacer_lib_elsewhere"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the build's error lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "cannot find") {
		t.Errorf("the build reached the linker:\n%s", out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
