package apiconn

import (
	"errors"
	"net"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestPreferred: the first identity while it is answered; once refused,
// the other, asked first from then on; an error of reach decides nothing;
// both refused, the refusal; each change reported once.
func TestPreferred(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	down := &net.OpError{Op: "dial", Err: errors.New("connection refused")}
	var reported []int
	p := &Preferred{Answered: func(i int, _ error) { reported = append(reported, i) }}
	// answers[i] is what identity i answers in the step; asked what the
	// step must have asked, in order.
	for n, step := range []struct {
		answers [2]error
		asked   []int
		forbid  bool
	}{
		{[2]error{nil, nil}, []int{0}, false},
		{[2]error{down, nil}, []int{0}, false},         // reach: no switch
		{[2]error{forbidden, nil}, []int{0, 1}, false}, // refused: the other
		{[2]error{nil, nil}, []int{1}, false},          // asked first from then on
		{[2]error{nil, forbidden}, []int{1, 0}, false}, // and back when it is refused
		{[2]error{forbidden, forbidden}, []int{0, 1}, true},
	} {
		var asked []int
		err := p.Do(func(i int) error {
			asked = append(asked, i)
			return step.answers[i]
		})
		if !slices.Equal(asked, step.asked) {
			t.Errorf("step %d: asked %v, want %v", n, asked, step.asked)
		}
		if apierrors.IsForbidden(err) != step.forbid {
			t.Errorf("step %d: %v", n, err)
		}
	}
	if want := []int{0, 1, 0}; !slices.Equal(reported, want) {
		t.Errorf("reported %v, want %v", reported, want)
	}
}
