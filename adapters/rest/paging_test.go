package rest

import (
	"testing"
	"time"
)

func TestPageCutsAfterTheCursorInKeyOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	type item struct {
		at time.Time
		id string
	}
	// Out of order, two made at the same instant, one at the zero time.
	items := []item{{t0.Add(2 * time.Second), "c"}, {t0, "b"}, {t0, "a"}, {time.Time{}, "z"}, {t0.Add(time.Second), "d"}}
	key := func(x item) string { return timeKey(x.at, x.id) }
	ids := func(xs []item) (out string) {
		for _, x := range xs {
			out += x.id
		}
		return out
	}
	two := 2
	got, next, err := page(append([]item(nil), items...), key, &two, nil)
	if err != nil || ids(got) != "za" || next == nil {
		t.Fatalf("first page %q %v %v", ids(got), next, err)
	}
	// The next page starts after the cursor even when its item is gone.
	rest := []item{items[0], items[1], items[4]} // z and a went away
	got, next2, err := page(rest, key, &two, next)
	if err != nil || ids(got) != "bd" || next2 == nil {
		t.Fatalf("second page %q %v %v", ids(got), next2, err)
	}
	got, next3, err := page(rest, key, &two, next2)
	if err != nil || ids(got) != "c" || next3 != nil {
		t.Fatalf("last page %q %v %v", ids(got), next3, err)
	}
	if got, next, err := page(append([]item(nil), items...), key, nil, nil); err != nil || len(got) != 5 || next != nil {
		t.Fatalf("no limit: %d %v %v", len(got), next, err)
	}
	for _, bad := range []int{0, -1, maxPage + 1} {
		if _, _, err := page(items, key, &bad, nil); err == nil || err.status != 400 {
			t.Fatalf("limit %d: %v", bad, err)
		}
	}
	hostile := "\x00../../\"{}"
	if got, _, err := page(append([]item(nil), items...), key, &two, &hostile); err != nil || len(got) != 2 {
		t.Fatalf("a hostile cursor: %v %v", got, err)
	}
}
