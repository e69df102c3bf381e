package pacer

// The Status constants are a hand-kept list; cgo.go checks each value
// against the header at compile time, and this test checks that the list
// is complete: every PACER_STATUS_* of include/pacer.h has a Status
// constant with the same number and name (StatusForeignTicket for
// PACER_STATUS_FOREIGN_TICKET), and no constant names a status the header
// lacks.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestStatusListMatchesHeader(t *testing.T) {
	header, err := os.ReadFile(filepath.Join("..", "..", "include", "pacer.h"))
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(header), "enum pacer_status")
	if start < 0 {
		t.Fatal("no enum pacer_status in pacer.h")
	}
	body := string(header[start:])
	body = body[:strings.Index(body, "};")]
	inHeader := map[string]uint64{} // "FOREIGNTICKET" -> 27
	for _, m := range regexp.MustCompile(`PACER_STATUS_(\w+) = (\d+),`).FindAllStringSubmatch(body, -1) {
		n, _ := strconv.ParseUint(m[2], 10, 32)
		inHeader[strings.ReplaceAll(m[1], "_", "")] = n
	}
	if len(inHeader) < 28 {
		t.Fatalf("read only %d statuses from pacer.h", len(inHeader))
	}

	inGo := map[string]uint64{}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if typ, ok := spec.Type.(*ast.Ident); !ok || typ.Name != "Status" {
				return true
			}
			for i, id := range spec.Names {
				lit, ok := spec.Values[i].(*ast.BasicLit)
				if !ok {
					t.Errorf("%s: not a literal", id.Name)
					continue
				}
				v, _ := strconv.ParseUint(lit.Value, 10, 32)
				inGo[strings.ToUpper(strings.TrimPrefix(id.Name, "Status"))] = v
			}
			return true
		})
	}
	for name, n := range inHeader {
		if v, ok := inGo[name]; !ok || v != n {
			t.Errorf("PACER_STATUS_%s = %d: Go has %d (present %v)", name, n, v, ok)
		}
	}
	for name, v := range inGo {
		if _, ok := inHeader[name]; !ok {
			t.Errorf("Status%s = %d is not in pacer.h", name, v)
		}
	}
}
