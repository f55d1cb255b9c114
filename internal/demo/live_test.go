package demo

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cgwarden/cgwarden/internal/realtest"
)

func TestDemoQuick(t *testing.T) {
	realtest.Require(t)
	realtest.LockCPU(t)
	res, err := Run(context.Background(), Options{Seeds: []string{Seed000, Seed003}, Duration: 3 * time.Second, Progress: os.Stderr})
	if res != nil {
		res.WriteText(os.Stderr)
		res.WriteJSON(os.Stderr)
	}
	if err != nil {
		t.Fatal(err)
	}
}
