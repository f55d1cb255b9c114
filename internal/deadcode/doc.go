// Package deadcode holds no code, only tests: that every function of the
// root module runs somewhere, as reported by golang.org/x/tools'
// deadcode (a tool dependency of the module: `go tool deadcode`), which
// follows calls (Rapid Type Analysis) from the roots it is given.
//
//   - From the binaries and the tests (`go tool deadcode -test ./...`):
//     no function is called by nothing at all.
//   - From the binaries alone (`go tool deadcode ./...`, whose roots are
//     cmd/cgwarden, cmd/cgwarden-sizer and cmd/kubectl-cgwarden): no
//     production function is called by tests only, so that the code the
//     tests exercise is the code that runs (issue 37). Packages realtest
//     and poll, test support by design, are left out.
//
// Each test has a short allowlist, every entry with the reason it stays
// (a separate module — test/scale, test/cluster — uses it, say); an entry
// that deadcode no longer reports is an error too, so the lists only
// shrink. Separate modules are invisible to deadcode run from the root:
// what only they call is on the list, with their name.
//
// Both run on the host lane: `go` is a host tool (realtest.HostTool), and
// the v2 lane's guest has none.
package deadcode
