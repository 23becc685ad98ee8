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
The service configuration as rendered into the ConfigMap: .Values.config with http_addr and
data_dir fixed to what the pod spec expects.
*/}}
{{- define "dms2iceberg.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $_ := set $cfg "http_addr" (printf "0.0.0.0:%d" (int .Values.metrics.port)) }}
{{- $_ := set $cfg "data_dir" "/data" }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Refuse what cannot work: the embedded SQLite catalog (type sql without a postgres:// uri) lives
in data_dir, so it needs persistence, and two replicas would each write their own catalog.
*/}}
{{- define "dms2iceberg.validate" -}}
{{- if not .Values.existingConfigSecret }}
{{- if not .Values.config.stream }}
{{- fail "config.stream is required: the Kinesis stream DMS writes to" }}
{{- end }}
{{- $type := dig "sink" "catalog" "type" "sql" .Values.config }}
{{- $uri := dig "sink" "catalog" "uri" "" .Values.config }}
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
