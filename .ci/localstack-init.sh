#!/bin/bash
# LocalStack "ready" hook (mounted into /etc/localstack/init/ready.d/ by docker-compose.yml):
# creates what .ci/compose-config.yaml expects. Idempotent.
set -eu
awslocal kinesis create-stream --stream-name dms2iceberg-demo --shard-count 4 2>/dev/null || true
awslocal kinesis wait stream-exists --stream-name dms2iceberg-demo
awslocal s3api create-bucket --bucket warehouse 2>/dev/null || true
echo "dms2iceberg: stream dms2iceberg-demo and bucket warehouse ready"
