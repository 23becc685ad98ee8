# dms2iceberg developer targets. `make help` lists them. Everything runs from a fresh clone: the
# .ci scripts install the pinned emulators and tools into .emu/ on first use.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

EMU_DIR ?= $(CURDIR)/.emu
export EMU_DIR
# Pinned tools (.ci/tools.sh) first; /usr/local/go/bin as a fallback for Go.
export PATH := $(EMU_DIR)/bin:$(PATH):/usr/local/go/bin
export GOTOOLCHAIN ?= local

FUZZTIME ?= 60s
CHAOS_CYCLES ?= 200
# Production-like chaos: CHAOS_RATE records/s; CHAOS_DEPS, a list of the dependencies to fault:
# rest (the REST catalog), s3 (the warehouse in the S3 emulator, the embedded SQL catalog),
# dynamodb (the KCL lease table), kinesis (the workers' GetRecords and heartbeat PutRecords), or
# all (dynamodb,kinesis,s3); empty: the embedded SQL catalog on local files, no proxy. rest with
# s3 is refused (the shared REST server cannot write s3://).
CHAOS_RATE ?=
CHAOS_DEPS ?=
# CHAOS_DELETE_MODE: the workers' sink.delete_mode (equality, position, dv); empty: by seed.
CHAOS_DELETE_MODE ?=
# CHAOS_LAYOUT: dms-default or primary-key-full (ParallelApply partitioning with full
# before-images, sent by 4 threads); empty: by seed. CHAOS_WORKERS: at most this many workers at once (2-5; empty: 3).
CHAOS_LAYOUT ?=
CHAOS_WORKERS ?=
BENCHTIME ?= 1s
DEMO_ARGS ?=
EMU_ENV = eval "$$(.ci/emulators.sh env)" && eval "$$(.ci/catalogs.sh env)" && eval "$$(.ci/spark.sh env)"

.PHONY: help build test test-unit test-integration chaos lint fmt fuzz bench tools validate-deploy \
	emulators-up emulators-down emulators-status catalogs-up catalogs-down catalogs-status \
	spark-install demo clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/dms2iceberg
	go build -o bin/dms2iceberg ./cmd/dms2iceberg

test: ## THE test command: install+start emulators, catalog servers, Spark and tools, vet, unit + integration tests (-race), lint
	.ci/test.sh

test-unit: ## unit tests with -race (no emulators needed)
	go test -race -count=1 ./...

test-integration: ## end-to-end tests; needs the emulators and catalog servers up (make emulators-up catalogs-up spark-install)
	@.ci/emulators.sh status >/dev/null || { .ci/emulators.sh status; \
	  echo "test-integration: the emulators are not (all) running: run 'make emulators-up' first (or 'make test')" >&2; exit 1; }
	@.ci/catalogs.sh status >/dev/null || { .ci/catalogs.sh status; \
	  echo "test-integration: the catalog servers are not (all) running: run 'make catalogs-up' first (or 'make test')" >&2; exit 1; }
	@.ci/spark.sh status >/dev/null || { .ci/spark.sh status; \
	  echo "test-integration: pyspark, pyiceberg or the Iceberg Spark runtime is missing: run 'make spark-install' first (or 'make test')" >&2; exit 1; }
	$(EMU_ENV) && DMS2ICEBERG_RACE=$${DMS2ICEBERG_RACE:-1} \
	  go test -race -count=1 -tags integration -timeout 60m ./integration/...

chaos: ## long crash-anywhere run: CHAOS_CYCLES (200) randomized kills, fault points, SIGSTOPs, restarts, reshards; needs the emulators (DMS2ICEBERG_CHAOS_SEED replays)
	@.ci/emulators.sh status >/dev/null || { .ci/emulators.sh status; \
	  echo "chaos: the emulators are not (all) running: run 'make emulators-up' first" >&2; exit 1; }
	$(EMU_ENV) && DMS2ICEBERG_RACE=$${DMS2ICEBERG_RACE:-1} DMS2ICEBERG_CHAOS_CYCLES=$(CHAOS_CYCLES) \
	  DMS2ICEBERG_CHAOS_RATE=$(CHAOS_RATE) DMS2ICEBERG_CHAOS_DEPS=$(CHAOS_DEPS) DMS2ICEBERG_CHAOS_DELETE_MODE=$(CHAOS_DELETE_MODE) \
	  DMS2ICEBERG_CHAOS_LAYOUT=$(CHAOS_LAYOUT) DMS2ICEBERG_CHAOS_WORKERS=$(CHAOS_WORKERS) \
	  go test -race -count=1 -tags integration -run '^TestChaos$$' -timeout 6h -v ./integration/

lint: tools ## golangci-lint (pinned v2) with .ci/golangci.yml
	golangci-lint run -c .ci/golangci.yml ./...

fmt: tools ## rewrite files with the linters' formatters (gofmt, goimports)
	golangci-lint fmt -c .ci/golangci.yml ./...

validate-deploy: ## lint and render the Helm chart, cfn-lint the CloudFormation template, check the alert rules and JSON (installs helm, promtool, cfn-lint)
	.ci/validate-deploy.sh

fuzz: ## fuzz FuzzDecode and FuzzConvert in ./pkg/dms for FUZZTIME each (default 60s)
	go test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./pkg/dms
	go test -run '^$$' -fuzz '^FuzzConvert$$' -fuzztime=$(FUZZTIME) ./pkg/dms

bench: ## run every benchmark once with allocations (BENCHTIME, default 1s)
	go test -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) ./...

tools: ## install the pinned dev tools into .emu/bin
	@.ci/tools.sh install

emulators-up: ## install (first time) and start Kinesis/DynamoDB/S3 emulators; prints the env to export
	.ci/emulators.sh up
	@echo; echo '# for your shell:  eval "$$(.ci/emulators.sh env)"'; .ci/emulators.sh env

emulators-down: ## stop the emulators
	.ci/emulators.sh stop

emulators-status: ## show whether the emulators are running and answering
	.ci/emulators.sh status

catalogs-up: ## install (first time) and start the catalog servers (moto Glue, Iceberg REST, PostgreSQL); prints the env
	.ci/catalogs.sh up
	@echo; echo '# for your shell:  eval "$$(.ci/catalogs.sh env)"'; .ci/catalogs.sh env

catalogs-down: ## stop the catalog servers
	.ci/catalogs.sh stop

catalogs-status: ## show whether the catalog servers are running and answering
	.ci/catalogs.sh status

spark-install: ## install pyspark and the Iceberg Spark runtime (for the Spark read check); prints the env
	.ci/spark.sh install
	@echo; echo '# for your shell:  eval "$$(.ci/spark.sh env)"'; .ci/spark.sh env

demo: ## run the service on the embedded default with demo traffic until Ctrl-C (data in .data/)
	.ci/demo.sh $(DEMO_ARGS)

clean: ## remove build output and local demo data (bin/, .data/); .emu/ stays (rm -rf .emu to reinstall)
	rm -rf bin .data dist coverage.out

.PHONY: bench-ratio
bench-ratio: ## BenchmarkPipeline with the defaults a user gets (ordering arrival; ordering shard beside it) against the reference fast path (../shared/perfprobe), 3 alternating rounds, best of each and the ratio (~1 min; idle machine); OURS_CPU, OURS_BENCHTIME
	.ci/bench-ratio.sh

.PHONY: bench-freshness
bench-freshness: ## freshness p50/p90/p99/max through the emulators (PutRecords -> visible snapshot) and the arrival margin in use, ordering arrival vs shard, 1 and 3 workers (~10 min); BENCH_RATE (200), BENCH_CHANGES (12000), BENCH_ARRIVAL_MARGIN (consumer.arrival_margin), BENCH_ARRIVAL_MARGIN_FLOOR (consumer.arrival_margin_floor), BENCH_HEARTBEAT (consumer.heartbeat_interval), BENCH_HORIZON_INTERVAL, BENCH_FRESHNESS_OUT (per-record file + service logs, one per run: <path>.<ordering>-<workers>), BENCH_MAINTENANCE (0 turns table maintenance off)
	@.ci/emulators.sh status >/dev/null || { .ci/emulators.sh status; \
	  echo "bench-freshness: the emulators are not (all) running: run 'make emulators-up' first" >&2; exit 1; }
	$(EMU_ENV) && DMS2ICEBERG_RACE=0 go test -tags integration -run '^$$' -bench '^BenchmarkFreshness$$' -benchtime=1x -timeout 60m -v ./integration/

.PHONY: bench-scale
bench-scale: ## scale-out on primary-key partitioning with full before-images and key changes: 8 shards filled with 50,000 changes, time to equal tables with 1, 2 and 4 workers, then a live run at 500 records/s with a worker joining and one leaving (~15 min); BENCH_SHARDS, BENCH_CHANGES, BENCH_LOAD_ROWS, BENCH_WORKERS (1,2,4), BENCH_LIVE_RATE (0 skips the live run)
	@.ci/emulators.sh status >/dev/null || { .ci/emulators.sh status; \
	  echo "bench-scale: the emulators are not (all) running: run 'make emulators-up' first" >&2; exit 1; }
	$(EMU_ENV) && DMS2ICEBERG_RACE=0 go test -tags integration -run '^$$' -bench '^BenchmarkScale$$' -benchtime=1x -timeout 90m -v ./integration/

.PHONY: bench-tables
bench-tables: ## many tables: 200 tables at 1,000 changes/s in total, records of 0.4 KiB and 64 KiB, peak RSS and msgs/cpu-s, one process per size (~3 min); BENCH_TABLES (200), BENCH_RATE (1000), BENCH_SECONDS (60), BENCH_BUDGET (bytes, 128 MiB), BENCH_MAINTENANCE (1; 0 turns it off), BENCH_MAINTENANCE_CONCURRENCY (0: one per CPU)
	@for size in 0.4KiB 64KiB; do \
	  DMS2ICEBERG_BENCH_TABLES=1 go test -run '^$$' -bench "^BenchmarkManyTables/record=$$size\$$" -benchtime=1x -timeout 30m ./cmd/dms2iceberg/ || exit 1; \
	done

.PHONY: bench-hot
bench-hot: ## one hot table: 1, 2, 4 and 8 writers committing to it through the catalog servers' PostgreSQL (BENCH_CATALOG=rest|sqlite for others), commits/s, attempts per commit, rows/s, freshness (~3 min); BENCH_RATE (2000), BENCH_SECONDS (30)
	@.ci/catalogs.sh status >/dev/null || { .ci/catalogs.sh status; \
	  echo "bench-hot: the catalog servers are not (all) running: run 'make catalogs-up' first" >&2; exit 1; }
	eval "$$(.ci/catalogs.sh env)" && DMS2ICEBERG_BENCH_HOT=1 \
	  go test -run '^$$' -bench '^BenchmarkHotTable$$' -benchtime=1x -timeout 30m ./cmd/dms2iceberg/

.PHONY: bench-maintenance
bench-maintenance: ## CDC + background maintenance benchmark: 1M rows, 1,000 commits (~12 min); resize with BENCH_ROWS, BENCH_COMMITS, BENCH_KEYS, BENCH_FLUSH_INTERVAL, BENCH_LOAD_CHUNK; BENCH_DELETE_MODE=position|dv; BENCH_KEY=int|uuid|composite; BENCH_PYICEBERG_PYTHON times PyIceberg too; report also in BENCH_OUT (docs/benchmarks.md has the 1M and 20M commands)
	DMS2ICEBERG_BENCH_MAINTENANCE=1 BENCH_OUT=$${BENCH_OUT:-$(CURDIR)/bench-maintenance.md} \
	  go test -run '^$$' -bench '^BenchmarkMaintenanceCDC$$' -benchtime=1x -timeout 90m ./sink
