// Package cliflag holds the flag values that both of cgwarden's binaries
// (cmd/cgwarden and cmd/cgwarden-sizer) parse the same way: a bounded
// duration and the log level. It imports nothing of cgwarden, so that
// each binary's command package can use it without linking the other's.
package cliflag
