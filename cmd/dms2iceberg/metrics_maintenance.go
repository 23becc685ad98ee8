package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dms2iceberg/dms2iceberg/sink/maintenance"
)

// promMaintenanceMetrics is table maintenance's metric set (maintenance.Metrics): per table the
// measured state (delete and data files, snapshots, metadata size, lease, last compaction,
// positional branch) and the runs and their failures.
type promMaintenanceMetrics struct {
	deleteFiles  *prometheus.GaugeVec
	deleteRows   *prometheus.GaugeVec
	dataFiles    *prometheus.GaugeVec
	snapshots    *prometheus.GaugeVec
	metadata     *prometheus.GaugeVec
	leaseHeld    *prometheus.GaugeVec
	lastCompact  *prometheus.GaugeVec
	branchBehind *prometheus.GaugeVec
	runs         *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	deletesFreed *prometheus.CounterVec
	failures     *prometheus.CounterVec
}

var _ maintenance.Metrics = (*promMaintenanceMetrics)(nil)

// newPromMaintenanceMetrics registers maintenance's metrics on r.
func newPromMaintenanceMetrics(r *promRegistry) *promMaintenanceMetrics {
	const sub, table = "maintenance", "table"
	return &promMaintenanceMetrics{
		deleteFiles:  r.gauge(sub, "delete_files", "Equality-delete files outstanding in the current snapshot (every scan applies them).", table),
		deleteRows:   r.gauge(sub, "delete_rows", "Equality-delete rows outstanding in the current snapshot.", table),
		dataFiles:    r.gauge(sub, "data_files", "Data files in the current snapshot.", table),
		snapshots:    r.gauge(sub, "snapshots", "Snapshots in the table metadata.", table),
		metadata:     r.gauge(sub, "metadata_bytes", "Size of the current metadata file.", table),
		leaseHeld:    r.gauge(sub, "lease_held", "1 while this worker holds the table's maintenance lease.", table),
		lastCompact:  r.gauge(sub, "last_compaction_timestamp_seconds", "When the table was last compacted (by any worker).", table),
		branchBehind: r.gauge(sub, "positional_branch_behind_seconds", "How far behind main the positional branch shows the table (delete_mode position and dv): the age of the first change it does not show; 0 at main's head.", table),
		runs:         r.counter(sub, "runs_total", "Maintenance runs that changed something, by trigger.", table, "trigger"),
		duration:     r.histogram(sub, "duration_seconds", "Duration of maintenance runs.", commitBuckets, table),
		deletesFreed: r.counter(sub, "delete_files_removed_total", "Equality-delete files applied and removed by compaction.", table),
		failures:     r.counter(sub, "failures_total", "Failed maintenance steps (sweep, position, compact, expire, manifests, purge, orphans, lease).", table, "step"),
	}
}

func (m *promMaintenanceMetrics) MaintenanceChecked(st maintenance.Status) {
	m.deleteFiles.WithLabelValues(st.Table).Set(float64(st.DeleteFiles))
	m.deleteRows.WithLabelValues(st.Table).Set(float64(st.DeleteRows))
	m.dataFiles.WithLabelValues(st.Table).Set(float64(st.DataFiles))
	m.snapshots.WithLabelValues(st.Table).Set(float64(st.Snapshots))
	if st.MetadataBytes >= 0 {
		m.metadata.WithLabelValues(st.Table).Set(float64(st.MetadataBytes))
	}
	held := 0.0
	if st.LeaseHeld {
		held = 1
	}
	m.leaseHeld.WithLabelValues(st.Table).Set(held)
	if !st.LastCompaction.IsZero() {
		m.lastCompact.WithLabelValues(st.Table).Set(float64(st.LastCompaction.UnixNano()) / 1e9)
	}
	if st.HasBranch {
		m.branchBehind.WithLabelValues(st.Table).Set(st.BranchBehind.Seconds())
	}
}

func (m *promMaintenanceMetrics) Maintained(r maintenance.Report) {
	m.runs.WithLabelValues(r.Table, r.Trigger).Inc()
	m.duration.WithLabelValues(r.Table).Observe(r.Took.Seconds())
	m.deletesFreed.WithLabelValues(r.Table).Add(float64(r.DeleteFilesRemoved))
}

func (m *promMaintenanceMetrics) MaintenanceFailed(table, step string) {
	m.failures.WithLabelValues(table, step).Inc()
}
