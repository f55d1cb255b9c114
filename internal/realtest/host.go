//go:build !vmguest

package realtest

// InGuest is false outside the v2 lane's guests (see guest.go).
const InGuest = false
