{{/* Chart name, truncated to a DNS label. */}}
{{- define "faas-gpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the prefix of every object. The release name when it already
contains the chart name (`helm install faas-gpu` gives `faas-gpu`).
Truncated to 52 so suffixes like -profiles keep names within 63.
*/}}
{{- define "faas-gpu.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "faas-gpu.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "faas-gpu.labels" -}}
helm.sh/chart: {{ include "faas-gpu.chart" . }}
app.kubernetes.io/name: {{ include "faas-gpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: openfaas
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: include with (dict "ctx" . "component" "provider"). */}}
{{- define "faas-gpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "faas-gpu.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of one component's objects and pods. */}}
{{- define "faas-gpu.componentLabels" -}}
{{ include "faas-gpu.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* faas-gpu's image. */}}
{{- define "faas-gpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "faas-gpu.providerServiceAccountName" -}}
{{- if .Values.provider.serviceAccount.create }}
{{- default (include "faas-gpu.fullname" .) .Values.provider.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.provider.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "faas-gpu.agentServiceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (printf "%s-agent" (include "faas-gpu.fullname" .)) .Values.agent.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The function namespaces the provider gets a Role in, as a JSON list. */}}
{{- define "faas-gpu.functionNamespaces" -}}
{{- $ns := .Values.rbac.functionNamespaces | default (list .Values.openfaas.functionNamespace) }}
{{- toJson (uniq $ns) }}
{{- end }}

{{/* Name of the profiles ConfigMap the provider mounts; empty when none. */}}
{{- define "faas-gpu.profilesConfigMap" -}}
{{- if .Values.profilesConfigMap }}
{{- .Values.profilesConfigMap }}
{{- else }}
{{- printf "%s-profiles" (include "faas-gpu.fullname" .) }}
{{- end }}
{{- end }}

{{/* Where the profiles are mounted in the provider. */}}
{{- define "faas-gpu.profilesDir" -}}
/etc/faas-gpu/profiles
{{- end }}

{{/* Where the basic-auth Secret is mounted (secret_mount_path). */}}
{{- define "faas-gpu.secretMountPath" -}}
/var/secrets
{{- end }}

{{/* The gateway's functions_provider_url for this install. */}}
{{- define "faas-gpu.providerURL" -}}
{{- printf "http://%s.%s:%d/" (include "faas-gpu.fullname" .) .Release.Namespace (int .Values.provider.service.port) }}
{{- end }}

{{- /* What the provider does to functions, in a function namespace (Role)
or in all of them (ClusterRole): a Deployment per (function, GPU) and a
Service holding the function's record, their pods (readiness, logs), the
functions' Secrets, and events for pending reasons. */}}
{{- define "faas-gpu.functionRules" -}}
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
# Read only: a drain is over when no ReplicaSet can create pods any more.
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["services", "secrets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Pods: a warm replica's pod is labelled out of routing (patch) and removed
# when it is evicted (delete); a parked pod is adopted into a group (patch)
# and removed.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch", "delete"]
{{- if .Values.provider.parkedPods }}
# Parked pods are created by the provider itself (the rest by the
# ReplicaSet controller): only where the installation turns them on.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["create"]
{{- end }}
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["get", "list", "watch"]
{{- with .Values.rbac.extraRules }}
{{ toYaml . }}
{{- end }}
{{- end }}
