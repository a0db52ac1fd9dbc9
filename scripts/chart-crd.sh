#!/usr/bin/env bash
# Generate the chart's CRD template from the single source crds/trainiumjobs.trainium.dev.yaml
# (`make crds`). The CRD is a template, not in the chart's crds/ folder, because Helm never
# upgrades crds/: wrapped in `crds.enabled`, with the keep policy behind `crds.keep` and the
# release labels added. tests/chart/test_chart_crd.py fails when the two drift apart.
set -euo pipefail
SRC=${1:-crds/trainiumjobs.trainium.dev.yaml}
OUT=${2:-charts/trainium-operator/templates/crd-trainiumjobs.yaml}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
  echo "{{- /* Generated from $SRC by scripts/chart-crd.sh (make crds): do not edit. */}}"
  echo '{{- if .Values.crds.enabled }}'
  # After the top-level `metadata:` the keep annotation; after its `labels:` the release labels.
  awk '
    /^metadata:$/ && !meta {
      print
      print "  {{- if .Values.crds.keep }}"
      print "  annotations:"
      print "    # helm uninstall must not delete the CRD, and with it every TrainiumJob."
      print "    helm.sh/resource-policy: keep"
      print "  {{- end }}"
      meta = 1; next
    }
    /^  labels:$/ && meta && !labels {
      print
      print "    {{- include \"trainium-operator.releaseLabels\" . | nindent 4 }}"
      labels = 1; next
    }
    /^  annotations:$/ && meta { exit 3 }  # would be a duplicate key: merge by hand
    { print }
    END { if (!meta || !labels) exit 2 }
  ' "$SRC"
  echo '{{- end }}'
} >"$tmp" || { echo "chart-crd.sh: $SRC needs top-level metadata.labels and no annotations" >&2; exit 1; }
mv "$tmp" "$OUT"
trap - EXIT
echo "wrote $OUT"
