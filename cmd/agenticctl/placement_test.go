package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// --toleration reads kubectl's taint forms: KEY=VALUE[:EFFECT] (Equal),
// KEY[:EFFECT] (Exists), '*' (every taint).
func TestParseToleration(t *testing.T) {
	for in, want := range map[string]string{
		"gpu=yes:NoSchedule":  `{"effect":"NoSchedule","key":"gpu","operator":"Equal","value":"yes"}`,
		"gpu=":                `{"key":"gpu","operator":"Equal","value":""}`,
		"dedicated:NoExecute": `{"effect":"NoExecute","key":"dedicated","operator":"Exists"}`,
		"dedicated":           `{"key":"dedicated","operator":"Exists"}`,
		"*":                   `{"operator":"Exists"}`,
		"*:PreferNoSchedule":  `{"effect":"PreferNoSchedule","operator":"Exists"}`,
	} {
		got, err := parseToleration(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		b, _ := json.Marshal(got)
		if string(b) != want {
			t.Errorf("%q: %s, want %s", in, b, want)
		}
	}
	for in, want := range map[string]string{"": "want KEY", "=v": "want KEY", ":NoSchedule": "want KEY", "a=b:Evict": `effect "Evict"`} {
		if _, err := parseToleration(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
}
