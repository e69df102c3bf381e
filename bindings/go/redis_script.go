package pacer

import (
	"crypto/sha1"
	_ "embed" // pacer.lua
	"encoding/hex"
)

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
