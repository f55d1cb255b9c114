package journal

import (
	"testing"

	"github.com/cgwarden/cgwarden/internal/plan"
)

// TestWrittenByNamesTheCommand: WrittenBy keeps the files a command's
// runs wrote, with the value last written, and not those another
// command's runs wrote, a revert undid, or the kernel refused; a run
// resumed by another command stays the command's that began it.
func TestWrittenByNamesTheCommand(t *testing.T) {
	w := func(p, v string) *plan.Op { return &plan.Op{Kind: plan.Write, Path: p, Value: v} }
	entries := []Entry{
		{Seq: 1, Type: Begin, Apply: "f1", By: ByFix},
		{Seq: 2, Type: Intent, Apply: "f1", Op: w("/tier/cpu.shares", "7170")},
		{Seq: 3, Type: Done, Apply: "f1", Ref: 2},
		{Seq: 4, Type: Intent, Apply: "f1", Op: w("/pod/cpu.shares", "4096")},
		{Seq: 5, Type: Done, Apply: "f1", Ref: 4},
		{Seq: 6, Type: Intent, Apply: "f1", Op: w("/refused/cpu.shares", "9")},
		{Seq: 7, Type: Failed, Apply: "f1", Ref: 6},
		{Seq: 8, Type: Intent, Apply: "f1", Op: w("/undone/cpu.shares", "9")},
		{Seq: 9, Type: Done, Apply: "f1", Ref: 8},
		{Seq: 10, Type: Undone, Apply: "f1", Ref: 8},
		{Seq: 11, Type: Begin, Apply: "s1", By: ByServe},
		{Seq: 12, Type: Intent, Apply: "s1", Op: w("/other/cpu.shares", "2048")},
		{Seq: 13, Type: Done, Apply: "s1", Ref: 12},
		{Seq: 14, Type: Begin, Apply: "f2", By: ByFix},
		{Seq: 15, Type: Resume, Apply: "f2", By: ByServe},
		{Seq: 16, Type: Intent, Apply: "f2", Op: w("/tier/cpu.shares", "8194")},
	}
	got := WrittenBy(Applies(entries), ByFix)
	want := map[string]string{"/tier/cpu.shares": "8194", "/pod/cpu.shares": "4096"}
	if len(got) != len(want) {
		t.Fatalf("WrittenBy(fix) = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("WrittenBy(fix)[%s] = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if s := WrittenBy(Applies(entries), ByServe); len(s) != 1 || s["/other/cpu.shares"] != "2048" {
		t.Errorf("WrittenBy(serve) = %v", s)
	}
}
