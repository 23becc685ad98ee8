package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	kcl "github.com/vmware/vmware-go-kcl-v2/clientlibrary/interfaces"
	"go.uber.org/zap"

	"github.com/dms2iceberg/dms2iceberg/checkpoint"
	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// processor handles one lease of one shard. The KCL calls it from one goroutine.
type processor struct {
	c     *Consumer
	ctx   context.Context
	dec   *dms.Decoder
	shard string
	log   *zap.Logger
	track *checkpoint.Shard
	// saved is the last checkpoint this processor wrote (or started from).
	saved string
	// stale is set when a newer processor took over the same shard in this worker; a stale
	// processor never writes a checkpoint again.
	stale atomic.Bool
}

func (p *processor) Initialize(in *kcl.InitializationInput) {
	p.shard = in.ShardId
	start := ""
	if in.ExtendedSequenceNumber != nil && in.ExtendedSequenceNumber.SequenceNumber != nil {
		start = aws.ToString(in.ExtendedSequenceNumber.SequenceNumber)
	}
	if start == "TRIM_HORIZON" || start == "LATEST" || start == "AT_TIMESTAMP" || start == "SHARD_END" {
		start = ""
	}
	p.saved = start
	p.track = checkpoint.NewShard(p.shard, start)
	p.log = p.c.log.With(zap.String("shard", p.shard))
	p.c.register(p)
	p.log.Info("shard processor started", zap.String("from", start))
}

func (p *processor) ProcessRecords(in *kcl.ProcessRecordsInput) {
	p.checkpoint(in.Checkpointer)
	if len(in.Records) == 0 {
		return
	}
	p.c.metrics.Records(p.shard, len(in.Records), in.MillisBehindLatest)
	events := make([]change.Event, 0, len(in.Records))
	for i := range in.Records {
		r := &in.Records[i]
		seq := aws.ToString(r.SequenceNumber)
		events = append(events, change.Event{})
		ev := &events[len(events)-1]
		if err := p.dec.Decode(r.Data, ev); err != nil {
			events = events[:len(events)-1]
			p.deadLetter(seq, r.Data, err)
			continue
		}
		ev.Pos = change.Position{Stream: p.c.cfg.Stream, Shard: p.shard, Seq: seq}
		ev.Raw = r.Data
	}
	last := aws.ToString(in.Records[len(in.Records)-1].SequenceNumber)
	d := p.track.Begin(last, len(events))
	for i := range events {
		ev := &events[i]
		ev.Ack = d
		if err := p.c.sink.Submit(p.ctx, ev); err != nil {
			if p.ctx.Err() == nil {
				p.c.stop(fmt.Errorf("shard %s: hand over record %s: %w", p.shard, ev.Pos.Seq, err))
			}
			return // unacknowledged: never checkpointed, read again after restart
		}
	}
	p.checkpoint(in.Checkpointer)
}

// deadLetter stores an undecodable record. A failure to store it is fatal: the record must not
// be checkpointed past without a trace.
func (p *processor) deadLetter(seq string, raw []byte, cause error) {
	reason := cause.Error()
	var de *dms.DecodeError
	if errors.As(cause, &de) {
		reason = "decode: " + de.Error()
	}
	err := p.c.dlq.DeadLetter(p.ctx, change.DeadLetter{Stream: p.c.cfg.Stream, Shard: p.shard, Seq: seq, Reason: reason, Raw: raw})
	if err != nil {
		p.c.stop(fmt.Errorf("shard %s: dead-letter record %s: %w", p.shard, seq, err))
		return
	}
	p.c.metrics.DeadLettered(p.shard)
	p.log.Warn("dead-lettered undecodable record", zap.String("seq", seq), zap.String("reason", reason))
}

// checkpoint writes the shard checkpoint up to the committed prefix, if it moved.
func (p *processor) checkpoint(cp kcl.IRecordProcessorCheckpointer) {
	if cp == nil || p.stale.Load() {
		return
	}
	seq := p.track.Committed()
	if seq == "" || change.CompareSeq(seq, p.saved) <= 0 {
		return
	}
	if err := cp.Checkpoint(aws.String(seq)); err != nil {
		p.log.Warn("checkpoint failed; will retry", zap.String("seq", seq), zap.Error(err))
		return
	}
	p.saved = seq
	p.c.metrics.Checkpointed(p.shard, seq)
}

func (p *processor) Shutdown(in *kcl.ShutdownInput) {
	reason := aws.ToString(kcl.ShutdownReasonMessage(in.ShutdownReason))
	ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.ShutdownTimeout)
	defer cancel()
	if err := p.drain(ctx); err != nil {
		p.log.Error("shutdown: pending changes not committed; they will be read again", zap.String("reason", reason), zap.Error(err))
		return
	}
	if in.ShutdownReason == kcl.TERMINATE {
		// The shard is finished and everything read from it is committed.
		if p.stale.Load() {
			return
		}
		if err := in.Checkpointer.Checkpoint(nil); err != nil {
			p.log.Error("shutdown: SHARD_END checkpoint failed", zap.Error(err))
			return
		}
		p.log.Info("shard finished (SHARD_END)")
		return
	}
	p.checkpoint(in.Checkpointer)
	p.log.Info("shard processor stopped", zap.String("reason", reason), zap.String("checkpoint", p.saved))
}

// drain flushes the sink until every delivery of this processor is committed.
func (p *processor) drain(ctx context.Context) error {
	for p.track.Pending() > 0 {
		if err := p.c.sink.Flush(ctx); err != nil {
			return err
		}
		wait, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := p.track.WaitIdle(wait)
		cancel()
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}
