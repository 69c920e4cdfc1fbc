package inject

import "testing"

func TestReferenceRules(t *testing.T) {
	for _, c := range []struct {
		what, got string
		bad       bool
	}{
		{"name", NameProblem("ANTHROPIC_API_KEY"), false},
		{"name with a dash", NameProblem("API-KEY"), true},
		{"source env", SourceProblem(SourceEnv), false},
		{"source vault", SourceProblem("vault"), true},
		{"source other", SourceProblem("ssm"), true},
		{"env key", KeyProblem(SourceEnv, "REAL_KEY"), false},
		{"env key not a name", KeyProblem(SourceEnv, "a=b"), true},
		{"file key", KeyProblem(SourceFile, "team/anthropic"), false},
		{"file key going up", KeyProblem(SourceFile, "../x"), true},
		{"file key absolute", KeyProblem(SourceFile, "/etc/shadow"), true},
		{"file key empty", KeyProblem(SourceFile, "."), true},
	} {
		if (c.got != "") != c.bad {
			t.Errorf("%s: %q, want refused %v", c.what, c.got, c.bad)
		}
	}
	e := NewEndpoints([]string{"A", "B"})
	if why := e.Problem("A", "A_URL"); why != "" {
		t.Fatal(why)
	}
	if why := e.Problem("B", "A_URL"); why != "A_URL already names the endpoint of A" {
		t.Fatalf("twice: %q", why)
	}
	if why := e.Problem("B", "A"); why != "A is a secret's name" {
		t.Fatalf("a secret's name: %q", why)
	}
}
