//go:build vmguest

package realtest

// InGuest is true in the test binaries of the v2 lane's guests
// (scripts/vmtest builds them with -tags vmguest): an emulated node with
// none of the host's tools, where a test that measures the host or needs
// one of its programs has nothing to add (HostOnly, HostTool).
const InGuest = true
