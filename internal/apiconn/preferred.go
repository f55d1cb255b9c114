package apiconn

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Preferred chooses between two identities making the same requests, the
// first preferred (the node's own, acting as its associated node, before
// the agent's ServiceAccount): a request refused (403) as the identity
// asked first is made again as the other, and whichever is answered is
// asked first from then on. So where the first is allowed it is used from
// the first request; where it is not, it costs one refused request at
// start; an error of reach decides nothing; and a change of grants is
// followed at the next refusal. Written here because client-go has no
// fallback between two credentials for one request.
type Preferred struct {
	// Answered, when set, is called when the identity that answered (0
	// or 1) is not the one that answered last, and for the first answer;
	// refused is why the other was refused (nil when i was asked first).
	Answered func(i int, refused error)

	mu   sync.Mutex
	cur  int // the identity asked first
	said int // 1 + the identity last reported to Answered; 0: none
}

// Do makes req as the identity asked first, and again as the other when
// that is refused. Both refused, it returns the first refusal with the
// second's message beside it.
func (p *Preferred) Do(req func(identity int) error) error {
	p.mu.Lock()
	first := p.cur
	p.mu.Unlock()
	err := req(first)
	if err == nil {
		p.answered(first, nil)
	}
	if !apierrors.IsForbidden(err) {
		return err
	}
	other := 1 - first
	err2 := req(other)
	if err2 == nil {
		p.answered(other, err)
	}
	if apierrors.IsForbidden(err2) {
		return fmt.Errorf("%w; and as the other identity: %v", err, err2)
	}
	return err2
}

// Either makes req through ids[0] or ids[1], the two identities' clients,
// as Do chooses, and returns the answer of the last one asked.
func Either[C, T any](p *Preferred, ids [2]C, req func(C) (T, error)) (T, error) {
	var out T
	err := p.Do(func(i int) (err error) {
		out, err = req(ids[i])
		return err
	})
	return out, err
}

func (p *Preferred) answered(i int, refused error) {
	p.mu.Lock()
	p.cur = i
	report := p.said != i+1
	p.said = i + 1
	p.mu.Unlock()
	if report && p.Answered != nil {
		p.Answered(i, refused)
	}
}
