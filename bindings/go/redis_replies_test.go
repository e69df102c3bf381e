package pacer

// The one failure classification every fleet client keeps
// (docs/fleet-clients.md, "Which replies are failures"): each case of
// tests/fleet/replies.json, read from the file, has the class the file
// gives it.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestRedisRepliesClassified(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "tests", "fleet", "replies.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []struct {
			Reply *string `json:"reply"`
			Class string  `json:"class"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatalf("replies.json: %v", err)
	}
	if n := len(table.Cases); n < 20 {
		t.Fatalf("replies.json has %d cases; at least 20 expected", n)
	}
	for i, c := range table.Cases {
		switch {
		case c.Reply == nil:
			t.Errorf("case %d has no reply", i)
		case c.Class != "outage" && c.Class != "engine" && c.Class != "pacer":
			t.Errorf("case %d (%q): no such class %q", i, *c.Reply, c.Class)
		default:
			if got := classifyReply(*c.Reply).String(); got != c.Class {
				t.Errorf("%q: class %s, want %s", *c.Reply, got, c.Class)
			}
		}
	}
}
