package commit

import "errors"

// The errors below say what a caller may do after a failed commit. Match them with errors.Is. A
// lost race is iceberg-go's table.ErrCommitFailed (or a failed requirement, as the SQL and Glue
// catalogs report it): the change may be staged again on the reloaded table, which Run does.

// ErrPermanent marks an error after which the same change must not be tried again: trying it
// again cannot succeed (a table that a newer state version of dms2iceberg wrote, a reload whose
// staged commit changes the schema, a lost maintenance lease). Run returns such an error at once,
// without reloading the table or waiting. Permanent marks an error with it.
var ErrPermanent = errors.New("commit: permanent, not to be tried again")

// ErrSent marks the error of a commit request itself (the catalog's CommitTable), after which the
// commit may have taken effect, as opposed to a failure while staging that the catalog never saw.
// Such a commit may be tried again only after a reload told whether it landed (Op.Reloaded), which
// Run does; UnknownOutcome tells which of these errors leave the outcome unknown. Sent marks an
// error with it.
var ErrSent = errors.New("commit: the commit request was sent")

// Permanent marks err with ErrPermanent, so that Run returns it at once instead of trying again.
// The error says what err says.
func Permanent(err error) error { return mark(err, ErrPermanent) }

// Sent marks err with ErrSent: it is the error of the commit request itself. Stage functions wrap
// the error of the request with it so that UnknownOutcome can tell. The error says what err says.
func Sent(err error) error { return mark(err, ErrSent) }

// marked is an error that also matches a sentinel (errors.Is) and says what the error it wraps
// says: the sentinels classify errors without changing their text in logs and in what Run returns.
type marked struct{ err, sentinel error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.sentinel} }

// mark returns err marked with sentinel; nil stays nil.
func mark(err, sentinel error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, sentinel: sentinel}
}
