package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/dms2iceberg/dms2iceberg/pkg/change"
	"github.com/dms2iceberg/dms2iceberg/pkg/dms"
)

// Dead letters keep the column rules (exclude_columns, hash_columns, mask_columns): a value the
// configuration keeps out of the lake must not reach it through the dead-letter place. With no
// column rule configured anywhere, dead letters are stored as they came.
//
//   - A record that is a JSON object naming its table (the sink's dead letters, and the
//     consumer's undecodable records that still parse) gets that table's rules
//     (dms.RedactRecord): excluded columns are removed, hashed and masked ones hold what the
//     sink stores, and the top-level member dms.RedactedKey lists them. A replay
//     (change.Event.Redacted) stores those values as they are.
//   - A record that does not parse, or names no table, cannot be matched with any rule: while
//     any table has column rules it is replaced by redactedPayloadKey {bytes, sha256}.
//   - The reason of a consumer dead letter so redacted (or of a table with rules) loses its
//     quoted text: decode errors quote the offending input.

// redactedPayloadKey is the only member of the payload that replaces a record no rule could be
// matched with: {"dms2iceberg-redacted-payload": {"bytes": N, "sha256": "<hex>"}}.
const redactedPayloadKey = "dms2iceberg-redacted-payload"

// hasColumnRules reports whether any sink.tables entry excludes, hashes or masks a column.
func (c Config) hasColumnRules() bool {
	for _, t := range c.Tables {
		if len(t.ExcludeColumns)+len(t.HashColumns)+len(t.MaskColumns) > 0 {
			return true
		}
	}
	return false
}

// RedactDeadLetter applies the column rules to dl's record and reason (see above). Redacting a
// redacted dead letter changes nothing.
func (c Config) RedactDeadLetter(dl change.DeadLetter) change.DeadLetter {
	if !c.hasColumnRules() {
		return dl
	}
	out, src, ok := dms.RedactRecord(dl.Raw, dl.Table, c.DMS, c.redactRules)
	if !ok {
		if !strings.HasPrefix(string(dl.Raw), `{"`+redactedPayloadKey+`":`) {
			sum := sha256.Sum256(dl.Raw)
			out = fmt.Appendf(nil, `{%q:{"bytes":%d,"sha256":%q}}`, redactedPayloadKey, len(dl.Raw), hex.EncodeToString(sum[:]))
		}
	}
	dl.Raw = out
	if dl.Table == "" && (!ok || c.settingsFor(src).transformed()) {
		dl.Reason = redactReason(dl.Reason)
	}
	return dl
}

// redactRules are the rules of a table with column rules, nil for one without.
func (c Config) redactRules(src string) dms.TableRules {
	if st := c.settingsFor(src); st.transformed() {
		return tableRules{st}
	}
	return nil
}

// redactReason cuts a reason at its first quoted text (decode errors end with the quoted
// input they rejected: a malformed number, a bad key, the tail the JSON parser stopped at).
func redactReason(reason string) string {
	const note = "<quoted text removed: sink.tables column rules>"
	i := strings.IndexByte(reason, '"')
	if i < 0 || strings.HasSuffix(reason, note) {
		return reason
	}
	return reason[:i] + note
}

// redactingDLQ redacts dead letters before storing them; asyncRedactingDLQ also passes the
// asynchronous path on.
type redactingDLQ struct {
	inner change.DeadLetterer
	cfg   Config
}

func (r redactingDLQ) DeadLetter(ctx context.Context, dl change.DeadLetter) error {
	return r.inner.DeadLetter(ctx, r.cfg.RedactDeadLetter(dl))
}

// RedactDeadLetter implements change.DeadLetterRedactor (the consumer logs the redacted reason).
func (r redactingDLQ) RedactDeadLetter(dl change.DeadLetter) change.DeadLetter {
	return r.cfg.RedactDeadLetter(dl)
}

type asyncRedactingDLQ struct {
	redactingDLQ
	async AsyncDeadLetterer
}

func (r asyncRedactingDLQ) DeadLetterAsync(ctx context.Context, dl change.DeadLetter, done func(error)) error {
	return r.async.DeadLetterAsync(ctx, r.cfg.RedactDeadLetter(dl), done)
}

// redacting wraps dlq so that every dead letter is redacted; dlq itself when no column rule is
// configured.
func redacting(dlq change.DeadLetterer, cfg Config) change.DeadLetterer {
	if !cfg.hasColumnRules() {
		return dlq
	}
	r := redactingDLQ{inner: dlq, cfg: cfg}
	if a, ok := dlq.(AsyncDeadLetterer); ok {
		return asyncRedactingDLQ{redactingDLQ: r, async: a}
	}
	return r
}
