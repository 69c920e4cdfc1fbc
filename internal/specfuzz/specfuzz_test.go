package specfuzz

import (
	"math/rand/v2"
	"testing"
)

// TestValidCasesAreValid: what the generator calls valid, the spec allows,
// for every operation and many seeds; and every operation has mutations.
func TestValidCasesAreValid(t *testing.T) {
	j, err := NewJudge(nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &Generator{}
	total := 0
	for i, op := range Operations(j.Doc) {
		for seed := range uint64(5) {
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			for _, c := range g.Cases(op, r, 3) {
				total++
				if c.Kind != "valid" {
					continue
				}
				if err := j.Valid(c); err != nil {
					t.Errorf("%s: a valid case the spec forbids: %s %s %s: %v", op.Name(), c.Op.Method, c.URL(), c.Body, err)
				}
			}
		}
	}
	t.Logf("%d cases", total)
}
