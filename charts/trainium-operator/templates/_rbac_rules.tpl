{{/*
RBAC rules, one list per purpose. Exact verbs, no "*", no Secrets. Every verb is one the operator
uses: tests/e2e/test_zz_rbac_coverage.py checks both ways against the requests it recorded
(each request allowed, each granted verb used or allow-listed there with the reason).
*/}}

{{/* kopf itself: posting core/v1 Events; listing and watching CRDs (its resource scan). */}}
{{- define "trainium-operator.rules.framework" -}}
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- end }}

{{/* The operator's cluster-scoped objects: static FSx PVs, and Volcano queues (read only). */}}
{{- define "trainium-operator.rules.clusterScoped" -}}
- apiGroups: [""]
  resources: [persistentvolumes]
  # delete: the static PV of a deleted FSx job (ownerReferences cannot reach cluster scope).
  verbs: [get, create, delete]
- apiGroups: [scheduling.volcano.sh]
  resources: [queues]
  verbs: [get]
{{- end }}

{{/* The operator's namespaced objects: its jobs and their children (removed by the garbage
collector through ownerReferences, so no delete on children). */}}
{{- define "trainium-operator.rules.namespaced" -}}
- apiGroups: [trainium.dev]
  resources: [trainiumjobs]
  # patch: kopf's annotations; delete: runPolicy.ttlSecondsAfterFinished removes finished jobs.
  verbs: [get, list, watch, patch, delete]
- apiGroups: [trainium.dev]
  resources: [trainiumjobs/status]
  verbs: [patch]
- apiGroups: [batch.volcano.sh]
  resources: [jobs]
  verbs: [get, list, watch, create]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, create]
{{- end }}
