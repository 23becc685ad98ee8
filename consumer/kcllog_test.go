package consumer

import (
	"errors"
	"testing"

	chk "github.com/vmware/vmware-go-kcl-v2/clientlibrary/checkpoint"
	kclzap "github.com/vmware/vmware-go-kcl-v2/logger/zap"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A shard consumer ended by a refused lease renewal is logged as a warning; other KCL errors,
// on derived loggers too, stay errors.
func TestKCLLoggerWarnsOfARefusedRenewal(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	l := kclLogger{kclzap.NewZapLogger(zap.New(core).Sugar())}
	l.Errorf("Error in getRecords: %+v", chk.ErrLeaseNotAcquired{})
	l.Errorf("Error in getRecords: %+v", errors.New("throttled"))
	l.WithFields(map[string]any{"shard": "s"}).Errorf("Error in getRecords: %+v", chk.ErrLeaseNotAcquired{})
	var got []zapcore.Level
	for _, e := range logs.AllUntimed() {
		got = append(got, e.Level)
	}
	want := []zapcore.Level{zapcore.WarnLevel, zapcore.ErrorLevel, zapcore.WarnLevel}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("levels %v, want %v", got, want)
	}
}
