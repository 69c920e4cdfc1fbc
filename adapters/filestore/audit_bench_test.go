package filestore

import (
	"testing"
)

// BenchmarkAuditAppend is the audit log's cost on the path of a
// state-changing call (an exec): one entry marshalled and written.
func BenchmarkAuditAppend(b *testing.B) {
	l, err := NewAuditLog(AuditLogConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	e := auditEntry(1)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Append(e); err != nil {
			b.Fatal(err)
		}
	}
}
