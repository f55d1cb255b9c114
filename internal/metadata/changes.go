package metadata

// Changes tells a reader that a source's answer may have changed since
// it last looked, without saying what: the reader asks the source again.
// Notify never blocks, and any number of Notify calls between two reads
// wake the reader once. The zero value is not usable: NewChanges.
//
// It is what lets the weight holder read the sizes when an informer says
// a pod, a VM object, the size policy or the Node changed, instead of
// asking every 250 ms in case one did.
type Changes struct{ c chan struct{} }

// NewChanges makes a Changes.
func NewChanges() *Changes { return &Changes{c: make(chan struct{}, 1)} }

// Notify marks a change. A nil Changes ignores it.
func (c *Changes) Notify() {
	if c == nil {
		return
	}
	select {
	case c.c <- struct{}{}:
	default: // one is pending: the reader has yet to look
	}
}

// C yields once for the changes marked since it last yielded.
// A nil Changes never yields.
func (c *Changes) C() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.c
}
