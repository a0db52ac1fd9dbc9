{{/* Names and labels shared by every template. */}}

{{- define "trainium-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* release-chart, or just the release when it already contains the chart name. */}}
{{- define "trainium-operator.fullname" -}}
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

{{- define "trainium-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that say which release owns an object; also added to the CRD (see make crds). */}}
{{- define "trainium-operator.releaseLabels" -}}
helm.sh/chart: {{ include "trainium-operator.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "trainium-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainium-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "trainium-operator.labels" -}}
helm.sh/chart: {{ include "trainium-operator.chart" . }}
{{ include "trainium-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "trainium-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainium-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest is given (the tag is then ignored), else repository:tag. */}}
{{- define "trainium-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The ServiceAccount as an RBAC subject. */}}
{{- define "trainium-operator.subject" -}}
- kind: ServiceAccount
  name: {{ include "trainium-operator.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end }}

{{/*
Seconds in a Prometheus duration ("2h", "1h30m", "90s", "0"), for comparisons in PromQL, which
has no duration literals in Prometheus 2. Units as in Prometheus: y = 365d, w = 7d.
*/}}
{{- define "trainium-operator.durationSeconds" -}}
{{- $unit := dict "y" 31536000 "w" 604800 "d" 86400 "h" 3600 "m" 60 "s" 1 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|[ywdhms])" . -1 -}}
{{- $n := regexFind "^[0-9]+" . | int64 -}}
{{- $u := trimPrefix (regexFind "^[0-9]+" .) . -}}
{{- if ne $u "ms" -}}
{{- $total = add $total (mul $n (get $unit $u)) -}}
{{- end -}}
{{- end -}}
{{- $total -}}
{{- end }}

{{/*
Refuse values a JSON schema cannot compare: the health and metrics servers bind in one pod, so
equal ports would crash the operator with "address already in use".
*/}}
{{- define "trainium-operator.checkValues" -}}
{{- if eq (int .Values.metrics.port) (int .Values.health.port) -}}
{{- fail (printf "metrics.port and health.port must differ (both are %d): the operator serves /metrics and /healthz on separate ports of one pod" (int .Values.metrics.port)) -}}
{{- end -}}
{{- end -}}

{{/*
Labels every training pod the operator creates carries (builders.labels: LABEL_MANAGED_BY and
LABEL_STAGE), and the trainer's metrics port (trainium_trainer.contract.METRICS_PORT, the
containerPort named `metrics`); tests/chart/test_chart_networkpolicy.py fails when they drift.
*/}}
{{- define "trainium-operator.trainingPodLabels" -}}
app.kubernetes.io/managed-by: trainium-operator
trainium.dev/stage: train
{{- end }}

{{- define "trainium-operator.trainingMetricsPort" -}}
9400
{{- end }}

{{/*
leaderElection with its deprecated names (peering.*, kopf peering's) applied when set, as JSON:
`include "trainium-operator.leaderElection" . | fromJson`.
*/}}
{{- define "trainium-operator.leaderElection" -}}
{{- $election := deepCopy .Values.leaderElection -}}
{{- $old := .Values.peering | default dict -}}
{{- if hasKey $old "enabled" }}{{ $_ := set $election "enabled" $old.enabled }}{{ end -}}
{{- if hasKey $old "name" }}{{ $_ := set $election "leaseName" $old.name }}{{ end -}}
{{- if hasKey $old "lifetimeSeconds" }}{{ $_ := set $election "leaseDurationSeconds" $old.lifetimeSeconds }}{{ end -}}
{{- toJson $election -}}
{{- end }}

{{/*
Whether this release renders the CRD guard (crd-guard.yaml): with the CRD, and without it as well
(the kept CRD is still installed), unless another release holds the guard already (one
cluster-wide name: two releases would fight over it). `helm template` looks up nothing: rendered.
*/}}
{{- define "trainium-operator.guardsCrd" -}}
{{- if .Values.crds.enabled -}}
true
{{- else -}}
{{- $live := lookup "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" "" "trainiumjobs.trainium.dev-keep-fields" -}}
{{- $release := dig "metadata" "annotations" "meta.helm.sh/release-name" "" $live -}}
{{- $namespace := dig "metadata" "annotations" "meta.helm.sh/release-namespace" "" $live -}}
{{- if or (not $live) (and (eq $release .Release.Name) (eq $namespace .Release.Namespace)) -}}
true
{{- end -}}
{{- end -}}
{{- end }}

{{/* CEL: the live CRD carries trainium.dev/allow-field-removal=true (the guard's way out). */}}
{{- define "trainium-operator.allowFieldRemoval" -}}
(has(oldObject.metadata.annotations) && 'trainium.dev/allow-field-removal' in oldObject.metadata.annotations && oldObject.metadata.annotations['trainium.dev/allow-field-removal'] == 'true')
{{- end }}

{{/*
CEL: every property of the schema `o` (an expression) is in the schema `n`, `depth` levels
down, through array items (core CEL has no recursion: the template unrolls it). Each level
binds its node with a one-element list's all(), so the text grows linearly with depth.
*/}}
{{- define "trainium-operator.keepsFields" -}}
{{- $d := int .depth -}}
{{- $O := printf "o%d" $d -}}
{{- $N := printf "n%d" $d -}}
{{- $k := printf "k%d" $d -}}
[has({{ .o }}.items) ? dyn({{ .o }}.items) : dyn({{ .o }})].all({{ $O }}, [has({{ .n }}.items) ? dyn({{ .n }}.items) : dyn({{ .n }})].all({{ $N }}, !has({{ $O }}.properties) || {{ $O }}.properties.all({{ $k }}, has({{ $N }}.properties) && {{ $k }} in {{ $N }}.properties
{{- if gt $d 1 }} && {{ include "trainium-operator.keepsFields" (dict "o" (printf "%s.properties[%s]" $O $k) "n" (printf "%s.properties[%s]" $N $k) "depth" (sub $d 1)) }}{{ end }})))
{{- end }}
