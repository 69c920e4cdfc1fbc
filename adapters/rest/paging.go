package rest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// maxPage bounds a page (parameter limit).
const maxPage = 1000

// page cuts one page out of items, sorted here by key: those after cursor
// (the key of the previous page's last item, so items that come or go
// between pages move no other across a page boundary), at most limit of
// them, and the cursor of the next page when more follow. Without limit,
// every item after cursor.
func page[T any](items []T, key func(T) string, limit *int, cursor *string) ([]T, *string, *apiError) {
	if limit != nil && (*limit < 1 || *limit > maxPage) {
		return nil, nil, badRequest("parameter limit: 1 to %d", maxPage)
	}
	slices.SortStableFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	if cursor != nil {
		from := sort.Search(len(items), func(i int) bool { return key(items[i]) > *cursor })
		items = items[from:]
	}
	if limit == nil || len(items) <= *limit {
		return items, nil, nil
	}
	items = items[:*limit]
	next := key(items[len(items)-1])
	return items, &next, nil
}

// timeKey orders oldest first, then by id: a page key for lists in the
// order their items were made.
func timeKey(t time.Time, id string) string {
	n := int64(0)
	if !t.IsZero() {
		n = t.UnixNano()
	}
	return fmt.Sprintf("%020d/%s", n, id)
}
