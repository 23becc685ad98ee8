package main

import (
	"bufio"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// gen --sent-log writes one line per record Kinesis accepted, in the order of the answers:
//
//	<schema.table>\t<shard id>\t<sequence number>\t<send time>\t<answer time> (Unix microseconds)
//
// The send time is taken just before the PutRecords request and the answer time just after its
// answer, so the record's arrival time (ApproximateArrivalTimestamp) lies between them: a
// freshness computed from the send time (BenchmarkFreshness in integration/) includes the
// PutRecords round trip and never flatters the service; one from the answer time leaves out
// the round trip and never flatters Kinesis (or the emulator standing in for it).

// openSentLog makes s write the log to path ("" writes none) and returns the function that
// flushes and closes it.
func (s *sender) openSentLog(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--sent-log: %w", err)
	}
	s.sentLog = bufio.NewWriterSize(f, 1<<16)
	return func() error {
		ferr := s.sentLog.Flush()
		if cerr := f.Close(); ferr == nil {
			ferr = cerr
		}
		if ferr != nil {
			return fmt.Errorf("--sent-log: %w", ferr)
		}
		return nil
	}, nil
}

// logSent records one accepted record; a write error surfaces when the log is closed.
func (s *sender) logSent(table string, r ktypes.PutRecordsResultEntry, sentAt, answeredAt time.Time) {
	if s.sentLog == nil {
		return
	}
	fmt.Fprintf(s.sentLog, "%s\t%s\t%s\t%d\t%d\n", table, aws.ToString(r.ShardId), aws.ToString(r.SequenceNumber), sentAt.UnixMicro(), answeredAt.UnixMicro())
}
