{{/* Name of the chart, overridable. */}}
{{- define "hybrid-scaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name: the release name, suffixed by the chart name unless it already contains it. */}}
{{- define "hybrid-scaler.fullname" -}}
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

{{- define "hybrid-scaler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hybrid-scaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hybrid-scaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hybrid-scaler.labels" -}}
{{ include "hybrid-scaler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "hybrid-scaler.chart" . }}
{{- end }}

{{- define "hybrid-scaler.serviceAccountName" -}}
{{- if .Values.operatorServiceAccount.create }}
{{- default (include "hybrid-scaler.fullname" .) .Values.operatorServiceAccount.name }}
{{- else }}
{{- default "default" .Values.operatorServiceAccount.name }}
{{- end }}
{{- end }}

{{- define "hybrid-scaler.roleName" -}}
{{- default (include "hybrid-scaler.fullname" .) .Values.rbac.operatorRole.name }}
{{- end }}

{{- define "hybrid-scaler.roleBindingName" -}}
{{- default (include "hybrid-scaler.fullname" .) .Values.rbac.operatorRoleBinding.name }}
{{- end }}

{{- define "hybrid-scaler.peeringName" -}}
{{- default (include "hybrid-scaler.fullname" .) .Values.peering.name }}
{{- end }}

{{- define "hybrid-scaler.imagePath" -}}
{{- if .Values.image.digest }}
{{- .Values.image.repository }}@{{ .Values.image.digest }}
{{- else }}
{{- .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end }}
{{- end }}

{{/* Peering is on only with more than one replica: a single replica runs standalone. */}}
{{- define "hybrid-scaler.peered" -}}
{{- if gt (int .Values.replicas) 1 }}true{{- end }}
{{- end }}

{{/* Shards (values.shards): the Deployment of shard i (list root i); unsharded, the plain name. */}}
{{- define "hybrid-scaler.shardName" -}}
{{- $root := index . 0 }}{{- $shard := index . 1 }}
{{- if gt (int $root.Values.shards) 1 }}
{{- printf "%s-shard-%d" (include "hybrid-scaler.fullname" $root) $shard }}
{{- else }}
{{- include "hybrid-scaler.fullname" $root }}
{{- end }}
{{- end }}

{{/* The label telling shards' pods apart (list root i); none when unsharded, so the
selector of an existing single Deployment does not change. */}}
{{- define "hybrid-scaler.shardLabel" -}}
{{- $root := index . 0 }}{{- $shard := index . 1 }}
{{- if gt (int $root.Values.shards) 1 }}
hybridscaler.dev/shard: {{ $shard | quote }}
{{- end }}
{{- end }}

{{/* The peering of shard i (list root i): the controller appends -shard-<i> to
--peering when sharded (controller/operator/shard.py, peering_name). */}}
{{- define "hybrid-scaler.shardPeeringName" -}}
{{- $root := index . 0 }}{{- $shard := index . 1 }}
{{- if gt (int $root.Values.shards) 1 }}
{{- printf "%s-shard-%d" (include "hybrid-scaler.peeringName" $root) $shard }}
{{- else }}
{{- include "hybrid-scaler.peeringName" $root }}
{{- end }}
{{- end }}
