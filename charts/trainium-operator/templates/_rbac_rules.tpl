{{/*
RBAC rules, one list per purpose. Exact verbs, no "*", no Secrets. Every verb is one the operator
uses: tests/e2e/test_zz_rbac_coverage.py checks both ways against the requests it recorded
(each request allowed, each granted verb used or allow-listed there with the reason).
*/}}

{{/* kopf itself: posting core/v1 Events; listing and watching CRDs (its resource scan); the
replicas' leader election (a Lease of one name, in the release namespace: the ClusterRole names it). */}}
{{- define "trainium-operator.rules.framework" -}}
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- if (include "trainium-operator.leaderElection" . | fromJson).enabled }}
{{ include "trainium-operator.rules.leaderElection" . }}
{{- end }}
{{- end }}

{{/* The operator's cluster-scoped objects: static FSx PVs; Volcano queues, PriorityClasses and
Nodes (read only). */}}
{{- define "trainium-operator.rules.clusterScoped" -}}
- apiGroups: [""]
  resources: [persistentvolumes]
  # watch: a PV bound or released wakes its job; patch: a Released PV's stale claimRef is
  # cleared; delete: the static PV of a deleted FSx job (ownerReferences cannot reach it).
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [scheduling.volcano.sh]
  resources: [queues]
  # watch: a queue created or opened wakes its jobs, and the hierarchy says which are leaves
  verbs: [get, list, watch]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  # spec.scheduling.priorityClassName must exist before a stage is submitted; watch: its
  # creation wakes the jobs that wait for it (no polling)
  verbs: [get, list, watch]
{{- if .Values.rbac.kueue }}
- apiGroups: [kueue.x-k8s.io]
  resources: [resourceflavors]
  # a Kueue job's admission names its flavor: its nodeLabels and tolerations reach the gang
  verbs: [get, list, watch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  # our Workloads (our label), one watch of every namespace, so here with watchNamespaces too
  # (the operator keeps those of its namespaces): a Workload's admission or eviction wakes its job
  verbs: [list, watch]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloadpriorityclasses]
  # the kueue.x-k8s.io/priority-class label: its value goes on the Workload
  verbs: [get]
{{- end }}
- apiGroups: [""]
  resources: [nodes]
  # spec.elastic: the nodes that could hold the gang, counted when a shrink or grow may be due;
  # watch: a Node deleted (its instance gone) has its gang pods removed at once, not by PodGC
  # 40+ s later; get: a node missing from the watch is confirmed before its pods are removed
  verbs: [get, list, watch]
- apiGroups: [resource.k8s.io]
  resources: [resourceslices, resourceclaims]
  # spec.devices dra, watched once a DRA job exists: the Neuron driver's slices (a field
  # selector) and the gang pods' claims (our label, from the template; one watch of every
  # namespace, so here with watchNamespaces too): a NoSchedule/NoExecute taint on a device a
  # claim holds takes its node out
  verbs: [list, watch]
{{- end }}

{{/* The operator's namespaced objects: its jobs and their children (removed by the garbage
collector through ownerReferences, so no delete on children but a pod whose Node is gone). */}}
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
  # delete: runPolicy.suspend and activeDeadlineSeconds stop the live stage jobs; patch: a spare
  # swap lowers a restarting gang's reservation (minAvailable) to the nodes left (spec.spares)
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  # watch: a claim created or bound wakes the jobs that mount it
  verbs: [get, list, watch, create]
- apiGroups: [""]
  resources: [configmaps]
  # compile-cache records: watched (labelled) so a Ready entry wakes the jobs waiting for it
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [pods]
  # watch: a gang pod's failure is classified while the pod still exists; delete (and patch
  # of pods/status): a gang pod bound to a deleted Node is removed as PodGC would (its
  # DisruptionTarget condition, then a force delete), 40+ s sooner
  verbs: [list, watch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods/log]
  # the last 50 lines of the failing container go into an Event and the condition
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  # list: a pending gang's FailedCreate Events (Volcano cannot create its pods) say why
  verbs: [list]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  # one writer per compile-cache entry
  verbs: [get, list, watch, create, patch, delete]
{{- if .Values.rbac.kueue }}
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  # a Kueue job (label kueue.x-k8s.io/queue-name) owns one Workload per stage; get: the whole
  # Workload before its requeue; delete: an elastic job's Workload of a size it no longer runs
  # at (as Kueue's job framework deletes one); patch: spec.active follows runPolicy.suspend
  # (false releases the quota); list/watch: with the cluster-scoped rules (one watch)
  verbs: [get, create, patch, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  # Finished when a stage ends (its quota is released at once); after an eviction, the
  # requeue (admission cleared); PodsReady from the gang (Kueue's waitForPodsReady)
  verbs: [patch]
- apiGroups: [kueue.x-k8s.io]
  resources: [localqueues]
  # a waiting job's condition names a LocalQueue that does not exist
  verbs: [get]
{{- end }}
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  # spec.devices dra: the job's template of Neuron device claims, created before each stage
  verbs: [create]
{{- end }}

{{/* The leader election (runtime/leadership.py). create cannot be limited to a name; reading and
renewing are. */}}
{{- define "trainium-operator.rules.leaderElection" -}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ (include "trainium-operator.leaderElection" . | fromJson).leaseName }}]
  verbs: [get, update]
{{- end }}
