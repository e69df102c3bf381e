//go:build !pacer_lib_elsewhere

package pacer

// A build of this package without libpacer.a stops here, with what to do,
// instead of at the linker with "cannot find -l:libpacer.a". The cgo
// directives (cgo.go) look in the repository's target/release; the header
// directory is on the include path, so the library's place relative to it
// is ../target/release. Built elsewhere (CARGO_TARGET_DIR): build with
// -tags pacer_lib_elsewhere and CGO_LDFLAGS=-L<that directory>/release.

//go:generate cargo build --release --locked -p pacer-ffi

/*
#if defined(__has_include)
#if !__has_include("../target/release/libpacer.a")
#error "libpacer.a is not built. Run `go generate` in bindings/go, or `cargo build --release --locked -p pacer-ffi` in the repository root. Built with CARGO_TARGET_DIR elsewhere? Build with -tags pacer_lib_elsewhere and CGO_LDFLAGS=-L<that directory>/release"
#endif
#endif
*/
import "C"
