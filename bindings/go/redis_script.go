package pacer

import (
	"crypto/sha1"
	_ "embed" // pacer.lua
	"encoding/hex"
)

// pacer.lua is generated: go:embed reads only files in the package's
// folder, so it is a copy of redis/pacer.lua, made again by `go generate`
// after the script changes (scripts/test-go.sh and a test fail while the
// two differ). It carries no header saying so: its bytes are the script's,
// whose SHA1 every client computes alike and whose line numbers appear in
// Redis's error replies.
//go:generate cp ../../redis/pacer.lua pacer.lua

// pacerScript is the package's copy of redis/pacer.lua, byte for byte (a
// test compares the two): what EngineScript sends with SCRIPT LOAD and
// runs with EVALSHA. Operators load the same file as the function library
// (docs/redis.md, "Loading"); the client never runs FUNCTION LOAD.
//
//go:embed pacer.lua
var pacerScript string

// pacerScriptSHA is the SHA1 that SCRIPT LOAD answers for pacerScript.
var pacerScriptSHA = func() string {
	sum := sha1.Sum([]byte(pacerScript))
	return hex.EncodeToString(sum[:])
}()

// PacerScript is the Lua file this package runs by EVALSHA (redis/pacer.lua).
// An operator who loads the function library loads it with the line
// "#!lua name=pacer" before it (FUNCTION LOAD).
func PacerScript() string { return pacerScript }
