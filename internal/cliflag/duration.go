package cliflag

import (
	"fmt"
	"time"
)

// Duration is a flag value that refuses negative and absurd intervals.
type Duration time.Duration

func (d *Duration) String() string { return time.Duration(*d).String() }
func (d *Duration) Type() string   { return "duration" }
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 || v > time.Hour {
		return fmt.Errorf("%s: want between 0 and 1h", s)
	}
	*d = Duration(v)
	return nil
}
