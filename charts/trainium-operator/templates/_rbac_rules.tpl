{{/*
RBAC rules, one list per purpose. Exact verbs, no "*", no Secrets. tests/rbac.py checks every
request the operator made in the e2e suite against what these rules render to.
*/}}

{{/* kopf itself: posting Events, watching CRDs (resource discovery), scanning namespaces. */}}
{{- define "trainium-operator.rules.framework" -}}
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end }}

{{/* The operator's cluster-scoped objects: static FSx PVs and Volcano queues. */}}
{{- define "trainium-operator.rules.clusterScoped" -}}
- apiGroups: [""]
  resources: [persistentvolumes]
  # watch: a PV bound or released wakes its job; patch: a Released PV's stale claimRef is cleared.
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [scheduling.volcano.sh]
  resources: [queues]
  verbs: [get, list, watch]
{{- end }}

{{/* The operator's namespaced objects: its jobs and their children. */}}
{{- define "trainium-operator.rules.namespaced" -}}
- apiGroups: [trainium.dev]
  resources: [trainiumjobs]
  # delete: runPolicy.ttlSecondsAfterFinished removes finished jobs.
  verbs: [get, list, watch, patch, delete]
- apiGroups: [trainium.dev]
  resources: [trainiumjobs/status]
  verbs: [get, patch, update]
- apiGroups: [batch.volcano.sh]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, create]
- apiGroups: [""]
  resources: [configmaps]
  # compile-cache records: watched (labelled) so a Ready entry wakes the jobs waiting for it
  verbs: [get, list, watch, create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  # one writer per compile-cache entry
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
{{- end }}
