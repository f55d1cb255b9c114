package metadata

import "testing"

// TestChangesCoalesce: many Notify calls before a read wake the reader
// once; one after the read wakes it again; a nil Changes ignores Notify.
func TestChangesCoalesce(t *testing.T) {
	c := NewChanges()
	pending := func() bool {
		select {
		case <-c.C():
			return true
		default:
			return false
		}
	}
	if pending() {
		t.Fatal("a new Changes is pending")
	}
	for range 5 {
		c.Notify()
	}
	if !pending() {
		t.Fatal("five Notify calls: nothing to read")
	}
	if pending() {
		t.Fatal("five Notify calls woke the reader twice")
	}
	c.Notify()
	if !pending() {
		t.Fatal("a Notify after the read: nothing to read")
	}
	var none *Changes
	none.Notify()
}
