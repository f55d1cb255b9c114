package httpserver

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listen opens a TCP listener on addr with SO_REUSEPORT: the listener of
// every cgwarden server that runs on the host's network (the agent's
// --listen and --local-listen, the NRI plugin's /metrics).
//
// A DaemonSet update with maxSurge starts the new agent pod beside the
// old one on the same node, both on the host's network, and deletes the
// old one only once the new one is Ready: the new agent must listen on
// the address the old one still holds. Linux lets it when every socket
// on the address set SO_REUSEPORT before bind and all were made by the
// same effective UID (socket(7)); the kernel then spreads new connections
// across the listeners, and once the old one closes its listener sends
// them all to the new one. A process of another user still gets
// EADDRINUSE, as does any process when one of the listeners lacks the
// option.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: reusePort}
	return lc.Listen(ctx, "tcp", addr)
}

// reusePort sets SO_REUSEPORT on the socket before it is bound.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_REUSEPORT: %w", serr)
	}
	return nil
}
