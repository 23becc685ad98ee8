{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "dms2iceberg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name. */}}
{{- define "dms2iceberg.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dms2iceberg.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dms2iceberg.labels" -}}
helm.sh/chart: {{ include "dms2iceberg.chart" . }}
{{ include "dms2iceberg.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "dms2iceberg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dms2iceberg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dms2iceberg.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dms2iceberg.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The service configuration as written into the ConfigMap: .Values.config (with http_addr and
data_dir set) when it is not empty, else .Values.configYaml verbatim.
*/}}
{{- define "dms2iceberg.config" -}}
{{- if .Values.config }}
{{- $cfg := deepCopy .Values.config }}
{{- $_ := set $cfg "http_addr" (printf "0.0.0.0:%d" (int .Values.metrics.port)) }}
{{- $_ := set $cfg "data_dir" "/data" }}
{{- toYaml $cfg }}
{{- else }}
{{- .Values.configYaml }}
{{- end }}
{{- end }}

{{/*
Refuse what cannot work: no configuration; an http_addr the probes cannot reach; the embedded
SQLite catalog (type sql without a postgres:// uri), which lives in data_dir, without a volume or
with two replicas (each would write its own catalog).
*/}}
{{- define "dms2iceberg.validate" -}}
{{- if not .Values.existingConfigSecret }}
{{- $cfg := dict }}
{{- if .Values.config }}
{{- $cfg = .Values.config }}
{{- else if .Values.configYaml }}
{{- $cfg = fromYaml .Values.configYaml }}
{{- if hasKey $cfg "Error" }}
{{- fail (printf "configYaml is not valid YAML: %s" (get $cfg "Error")) }}
{{- end }}
{{- $want := printf "0.0.0.0:%d" (int .Values.metrics.port) }}
{{- $addr := get $cfg "http_addr" | default "" }}
{{- if and (ne $addr $want) (ne $addr (printf ":%d" (int .Values.metrics.port))) }}
{{- fail (printf "configYaml: http_addr is %q; set http_addr: %s so that the probes and the Service reach the server" $addr $want) }}
{{- end }}
{{- else }}
{{- fail "set configYaml (--set-file configYaml=config.yaml), config, or existingConfigSecret" }}
{{- end }}
{{- if not (get $cfg "stream") }}
{{- fail "the configuration must set stream: the Kinesis stream DMS writes to" }}
{{- end }}
{{- $type := dig "sink" "catalog" "type" "sql" $cfg }}
{{- $uri := dig "sink" "catalog" "uri" "" $cfg }}
{{- if and (eq $type "sql") (not (or (hasPrefix "postgres://" $uri) (hasPrefix "postgresql://" $uri))) }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail "the embedded SQLite catalog supports one replica only (each replica would write its own catalog): use Glue, REST or PostgreSQL for replicaCount > 1 (docs/scaling.md)" }}
{{- end }}
{{- if not .Values.persistence.enabled }}
{{- fail "the embedded SQLite catalog lives in data_dir: set persistence.enabled=true, or use Glue, REST or PostgreSQL" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
