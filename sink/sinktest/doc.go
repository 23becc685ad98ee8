// Package sinktest owns the test harness parts that the tests of the sink and of its packages
// (sink/maintenance, sink/deletes) share: acknowledgement and dead-letter sinks, the change
// events and columns the tests submit, a local SQL catalog for tests that run no sink, checked
// Arrow allocators, and the readers that render a table's rows and list its files for
// assertions. It is imported only by tests and does not import the sink, so that the sink's own
// tests can use it.
package sinktest
