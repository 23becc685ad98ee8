// Package change owns the vocabulary shared by every stage of the pipeline: a decoded DMS change
// (Event), where it came from (Position), and how a stage reports that it is finished with events
// (Acker). It has no dependencies beyond the standard library and holds no state; values of these
// types are handed from one goroutine to the next and are not shared concurrently.
package change
