package consumer

import (
	"fmt"
	"strings"
	"testing"

	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
)

// redactingDLQ stands for the sink's dead letters with column rules: it stores and returns a
// dead letter whose reason lost its quoted text.
type redactingDLQ struct{ *fakeDLQ }

func (redactingDLQ) RedactDeadLetter(dl change.DeadLetter) change.DeadLetter {
	dl.Reason, _, _ = strings.Cut(dl.Reason, `"`)
	return dl
}

// The log line of an undecodable record shows its reason as the dead-letter place redacts it:
// decode errors quote the value they rejected.
func TestProcessorLogsTheRedactedReason(t *testing.T) {
	t.Parallel()
	e := newProcEnv(t)
	core, logs := observer.New(zap.DebugLevel)
	e.c.log = zap.New(core)
	e.c.dlq = redactingDLQ{e.dlq}
	p := e.start(shard, "")
	bad := []byte(`{"data":{"ssn":0123},"metadata":{"record-type":"data","operation":"insert","schema-name":"s","table-name":"t"}}`)
	p.ProcessRecords(&kcl.ProcessRecordsInput{Records: []ktypes.Record{{SequenceNumber: new("101"), Data: bad}}})
	if len(e.dlq.dead) != 1 || !strings.Contains(e.dlq.dead[0].Reason, "0123") {
		t.Fatalf("dead letters %+v, want the reason quoting 0123 handed over", e.dlq.dead)
	}
	var logged strings.Builder
	n := 0
	for _, en := range logs.All() {
		fmt.Fprintln(&logged, en.Message, en.ContextMap())
		if en.Message == "dead-lettered undecodable record" {
			n++
		}
	}
	if n != 1 || strings.Contains(logged.String(), "0123") {
		t.Fatalf("logs:\n%s", logged.String())
	}
}
