package pacer_test

// README.md's Go blocks run. Each ```go block is a complete program
// (package main); the test builds it in a module of its own, made the way
// the README tells a reader to (require the module by its path, replace it by this
// directory, go.sum copied from here, go build -mod=mod), runs it, and
// compares what it prints with the comment lines under its "// Output:".

import (
	"bytes"
	"context"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeGoBlockCount is how many ```go blocks README.md has: every one runs,
// none is skipped, so a block added or removed must change this number.
const readmeGoBlockCount = 7

// readmeRunTimeout bounds one block's run (its build is not counted):
// each finishes within a few seconds, whatever the machine's speed.
const readmeRunTimeout = 10 * time.Second

// The settings BudgetFromEnv reads: unset for the blocks, so that what
// they print does not depend on the environment the tests run in.
var readmePacerEnv = []string{"PACER_RATE_PER_MIN", "PACER_IDLE_TIMEOUT_MS", "PACER_TOTAL_TIMEOUT_MS", "PACER_MAX_RETRIES"}

type readmeBlock struct {
	line int    // line of the opening fence in README.md
	src  string // the block's text, without the fences
}

// readmeGoBlocks returns the ```go blocks of readme, in order.
func readmeGoBlocks(t *testing.T, readme string) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	var cur *readmeBlock
	open := false
	for i, line := range strings.Split(readme, "\n") {
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "```") {
			if cur != nil {
				cur.src += line + "\n"
			}
			continue
		}
		if open {
			if trimmed != "```" {
				t.Fatalf("README.md:%d: fence %q inside a block", i+1, trimmed)
			}
			if cur != nil {
				blocks = append(blocks, *cur)
			}
			open, cur = false, nil
			continue
		}
		open = true
		switch lang := strings.TrimPrefix(trimmed, "```"); {
		case lang == "go":
			cur = &readmeBlock{line: i + 1}
		case strings.EqualFold(lang, "go") || strings.EqualFold(lang, "golang"):
			t.Errorf("README.md:%d: fence %q: write ```go so that the block runs", i+1, trimmed)
		}
	}
	if open {
		t.Fatal("README.md: a block is not closed")
	}
	return blocks
}

// readmeOutput is the block's expected output: the comment lines after its
// "// Output:" line (or "// Output (…):"), each without "//" and spaces.
func readmeOutput(src string) (string, bool) {
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "// Output") || !strings.HasSuffix(line, ":") {
			continue
		}
		var want []string
		for _, o := range lines[i+1:] {
			o = strings.TrimSpace(o)
			if !strings.HasPrefix(o, "//") {
				break
			}
			want = append(want, strings.TrimSpace(strings.TrimPrefix(o, "//")))
		}
		return strings.Join(want, "\n"), true
	}
	return "", false
}

// trimLines trims each line of s and s itself.
func trimLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, "\n")
}

func TestReadmeGoBlocks(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeGoBlocks(t, string(readme))
	if len(blocks) != readmeGoBlockCount {
		t.Fatalf("README.md has %d ```go blocks, want %d (update readmeGoBlockCount)", len(blocks), readmeGoBlockCount)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is required to build the README's blocks: %v", err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	goSum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	goMod := fmt.Sprintf("module readme\n\ngo 1.26.0\n\nrequire github.com/connpacer/pacer/bindings/go v0.0.0\n\nreplace github.com/connpacer/pacer/bindings/go => %q\n", here)
	for _, b := range blocks {
		t.Run(fmt.Sprintf("line%d", b.line), func(t *testing.T) {
			runReadmeBlock(t, goTool, goMod, goSum, b)
		})
	}
}

// runReadmeBlock builds and runs one block and checks its output.
func runReadmeBlock(t *testing.T, goTool, goMod string, goSum []byte, b readmeBlock) {
	src := []byte(b.src)
	if formatted, err := format.Source(src); err != nil {
		t.Fatalf("README.md:%d: the block does not parse: %v\n%s", b.line, err, src)
	} else if !bytes.Equal(formatted, src) {
		t.Errorf("README.md:%d: the block is not gofmt-formatted; gofmt gives:\n%s", b.line, formatted)
	}
	if !strings.HasPrefix(b.src, "package main\n") || !strings.Contains(b.src, "\nfunc main() {\n") {
		t.Fatalf("README.md:%d: the block is not a complete program (package main, func main)", b.line)
	}
	want, ok := readmeOutput(b.src)
	if !ok {
		t.Fatalf("README.md:%d: the block shows no \"// Output:\" to check", b.line)
	}

	dir := t.TempDir()
	for name, data := range map[string][]byte{"go.mod": []byte(goMod), "go.sum": goSum, "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prog := filepath.Join(dir, "prog")
	build := exec.Command(goTool, "build", "-mod=mod", "-o", prog, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("README.md:%d: go build: %v\n%s", b.line, err, out)
	}

	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "REDIS_URL" && name != "PACER_SHARED_NAME" && !slices.Contains(readmePacerEnv, name) {
			env = append(env, kv)
		}
	}
	if strings.Contains(b.src, `"REDIS_URL"`) {
		// A server of its own, with the module when PACER_REDIS_MODULE
		// names it (else the client uses the script).
		s := startRedis(t, os.Getenv("PACER_REDIS_MODULE"))
		env = append(env, "REDIS_URL=redis://"+s.Addr())
	}
	if strings.Contains(b.src, `"PACER_SHARED_NAME"`) {
		// A bucket of its own, not /dev/shm's name another run may hold.
		env = append(env, "PACER_SHARED_NAME="+filepath.Join(dir, "bucket"))
	}

	ctx, cancel := context.WithTimeout(context.Background(), readmeRunTimeout)
	defer cancel()
	run := exec.CommandContext(ctx, prog)
	run.Dir, run.Env, run.WaitDelay = dir, env, time.Second
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	start := time.Now()
	err := run.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("README.md:%d: the program did not finish within %v\nstdout:\n%s\nstderr:\n%s", b.line, readmeRunTimeout, &stdout, &stderr)
	}
	if err != nil {
		t.Fatalf("README.md:%d: the program failed: %v\nstdout:\n%s\nstderr:\n%s", b.line, err, &stdout, &stderr)
	}
	if got := trimLines(stdout.String()); got != want {
		t.Errorf("README.md:%d: the program printed\n%s\nthe README shows\n%s\nstderr:\n%s", b.line, got, want, &stderr)
	}
	t.Logf("README.md:%d: ran in %v", b.line, took.Round(time.Millisecond))
}
