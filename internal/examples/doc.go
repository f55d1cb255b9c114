// Package examples embeds the example snapshots shipped with cgwarden, so
// that `--snapshot example:<name>` works from the binary alone, on a
// machine with no kubelet. Each snapshot's header says where it came from.
package examples
