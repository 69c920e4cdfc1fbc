package kubernetes

import (
	"maps"
	"strings"
	"testing"
)

// Labels go to annotations and come back, a prefixed key too (an
// annotation's name may hold one "/" only, so those are kept in one JSON
// annotation).
func TestLabelAnnotationsRoundTrip(t *testing.T) {
	labels := map[string]string{"team": "payments", "example.com/env": "dev", "agentic-sandbox.isolation": "gvisor"}
	ann := labelAnnotations(labels)
	for k := range ann {
		if strings.Count(k, "/") > 1 {
			t.Errorf("annotation name %q has more than one /", k)
		}
	}
	if got := annotatedLabels(ann); !maps.Equal(got, labels) {
		t.Fatalf("round trip: %v, want %v", got, labels)
	}
	if got := annotatedLabels(map[string]string{AnnotationEnv: "x"}); got != nil {
		t.Fatalf("no labels: %v", got)
	}
}
