package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// Timeout bounds each call to systemd: a hung bus must not hang an apply.
const Timeout = 30 * time.Second

// ErrRefused marks a property write the grant does not allow.
var ErrRefused = errors.New("refused by cgwarden's systemd grant")

// Bus is a connection to systemd's D-Bus API on the system bus.
type Bus struct {
	conn   *sd.Conn
	socket string
	writes atomic.Uint64
}

// Open connects to systemd through the system bus socket (a path beneath
// the host root; Node.Socket), as the kubelet does: authenticated as this
// process's user, with the bus's Hello. The connection lives as long as
// ctx: it is closed when ctx is done.
func Open(ctx context.Context, socket string) (*Bus, error) {
	if socket == "" {
		socket = BusSocket
	}
	conn, err := sd.NewConnection(func() (*godbus.Conn, error) {
		c, err := godbus.Dial("unix:path="+socket, godbus.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd through %s: %w", socket, err)
	}
	return &Bus{conn: conn, socket: socket}, nil
}

// Close ends the connection.
func (b *Bus) Close() error {
	b.conn.Close()
	return nil
}

// Writes counts the property writes made through b's grants.
func (b *Bus) Writes() uint64 { return b.writes.Load() }

// Property reads a weight property of unit (Unset when it was never set).
// An unknown unit is an error wrapping os.ErrNotExist: systemd answers
// NoSuchUnit for a unit it has not loaded, and for a loaded one whose
// cgroup is gone the caller's read of the file says so.
func (b *Bus) Property(unit, name string) (uint64, error) {
	typ, err := unitType(unit)
	if err != nil {
		return 0, err
	}
	if name != CPUWeight && name != CPUShares {
		return 0, fmt.Errorf("%s %s: cgwarden reads only %s and %s", unit, name, CPUWeight, CPUShares)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	p, err := b.conn.GetUnitTypePropertyContext(ctx, unit, typ, name)
	if err != nil {
		return 0, b.wrap("reading", unit, name, err)
	}
	v, ok := p.Value.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("systemd %s %s: not a uint64 but %s", unit, name, p.Value.Signature())
	}
	return v, nil
}

// Manages reports whether cgroup (a path in the cgroup hierarchy, as a
// scan names it) is the cgroup of a systemd unit right now, and which:
// its name is a slice's or a scope's and systemd says that unit's
// ControlGroup is exactly this path. A directory made behind systemd's
// back (a test's scratch tree, a misplace runtime's literal path) bears a
// unit's name but is not its cgroup.
func (b *Bus) Manages(cgroup string) (string, bool, error) {
	unit, ok := UnitOf(cgroup)
	if !ok {
		return "", false, nil
	}
	typ, err := unitType(unit)
	if err != nil {
		return "", false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	p, err := b.conn.GetUnitTypePropertyContext(ctx, unit, typ, "ControlGroup")
	if err != nil {
		if werr := b.wrap("reading", unit, "ControlGroup", err); errors.Is(werr, os.ErrNotExist) {
			return "", false, nil
		}
		return "", false, b.wrap("reading", unit, "ControlGroup", err)
	}
	cg, _ := p.Value.Value().(string)
	if cg == "" || path.Clean(cg) != path.Clean(cgroup) {
		return "", false, nil
	}
	return unit, true, nil
}

// loaded reports whether systemd knows unit now (LoadState "loaded"): a
// property set on a unit systemd does not know would create nothing but an
// error, and one set on a unit being garbage-collected would land nowhere.
func (b *Bus) loaded(ctx context.Context, unit string) error {
	return b.inState(ctx, unit, "LoadState", "loaded")
}

// inState reports whether unit's state property prop is want now; one
// that is not is an error wrapping os.ErrNotExist.
func (b *Bus) inState(ctx context.Context, unit, prop, want string) error {
	p, err := b.conn.GetUnitPropertyContext(ctx, unit, prop)
	if err != nil {
		return b.wrap("looking up", unit, prop, err)
	}
	if s, _ := p.Value.Value().(string); s != want {
		return fmt.Errorf("systemd unit %s is %q, not %s: %w", unit, s, want, os.ErrNotExist)
	}
	return nil
}

func (b *Bus) wrap(verb, unit, name string, err error) error {
	var de godbus.Error
	if errors.As(err, &de) && slices.Contains(notFound, de.Name) {
		err = fmt.Errorf("%w (%v)", os.ErrNotExist, err)
	}
	return fmt.Errorf("systemd: %s %s of %s: %w", verb, name, unit, err)
}

// notFound are systemd's answers for a unit it does not have.
var notFound = []string{"org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed",
	"org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownInterface"}

// Grant is a writer bound to what one checked plan names: the units whose
// weight properties it may set (Bus.Grant), or the scopes it may start
// (Bus.GrantScopes); End makes it refuse everything.
type Grant struct {
	b      *Bus
	units  []string
	scopes []Scope
	ended  atomic.Bool
}

// Grant returns a writer that may set the weight properties of units and
// of no other unit, until End.
func (b *Bus) Grant(units []string) *Grant {
	return &Grant{b: b, units: slices.Clone(units)}
}

// End revokes the grant.
func (g *Grant) End() { g.ended.Store(true) }

// SetProperty sets a weight property of unit at runtime (not persisted in
// /etc: it lasts as long as the unit, as the kubelet's own settings do),
// exactly as the kubelet's systemd driver does: SetUnitProperties with
// runtime=true. systemd writes the cgroup file itself, and writes it again
// from the property after a daemon-reload.
func (g *Grant) SetProperty(unit, name string, value uint64) error {
	switch {
	case g.ended.Load():
		return fmt.Errorf("systemd %s %s=%d: the grant has ended: %w", unit, name, value, ErrRefused)
	case !slices.Contains(g.units, unit):
		return fmt.Errorf("systemd %s %s=%d: not a unit the plan names: %w", unit, name, value, ErrRefused)
	case name != CPUWeight && name != CPUShares:
		return fmt.Errorf("systemd %s %s=%d: cgwarden sets only %s and %s: %w", unit, name, value, CPUWeight, CPUShares, ErrRefused)
	}
	if _, err := unitType(unit); err != nil {
		return fmt.Errorf("systemd %s: %w: %w", unit, err, ErrRefused)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := g.b.loaded(ctx, unit); err != nil {
		return err
	}
	g.b.writes.Add(1)
	if err := g.b.conn.SetUnitPropertiesContext(ctx, unit, true, sd.Property{Name: name, Value: godbus.MakeVariant(value)}); err != nil {
		return g.b.wrap("setting", unit, name, err)
	}
	return nil
}

// Socket is the bus socket b is connected through.
func (b *Bus) Socket() string { return path.Clean(b.socket) }
