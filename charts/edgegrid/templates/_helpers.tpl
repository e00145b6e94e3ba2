{{- define "edgegrid.image" -}}
{{ .root.Values.image.registry }}/{{ .name }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{- define "edgegrid.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: edgegrid
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ .root.Chart.Name }}-{{ .root.Chart.Version }}
{{- end -}}

{{- /* Where a cloud component's pods may run: its own values (nodeSelector, affinity,
tolerations, priorityClassName). Called with dict "root" $ "values" <component values>.
Without an affinity of its own, a cloud component is kept off the edge nodes: any node
lacking one of edgeNodeSelector's labels (NotIn also matches a node without the label;
terms are ORed). With an empty edgeNodeSelector every node is an edge node and nothing is
excluded. */ -}}
{{- define "edgegrid.scheduling" -}}
{{- $values := .values }}
{{- with $values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $values.affinity }}
affinity:
  {{- toYaml $values.affinity | nindent 2 }}
{{- else if .root.Values.edgeNodeSelector }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        {{- range $key, $value := .root.Values.edgeNodeSelector }}
        - matchExpressions:
            - {key: {{ $key | quote }}, operator: NotIn, values: [{{ $value | quote }}]}
        {{- end }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{- /* The nodeSelector of a per-node component: edgeNodeSelector's labels and the
component's own (its values' nodeSelector, which wins on a shared key). A component's own
labels move nodes over one at a time, e.g. from SuperEdge's daemon of the same job (README
"Migrating from SuperEdge"). Called with dict "root" $ "values" <component values>. */ -}}
{{- define "edgegrid.nodeNodeSelector" -}}
{{- $labels := merge (dict) (.values.nodeSelector | default dict) .root.Values.edgeNodeSelector }}
{{- with $labels }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- /* At least one replica through voluntary disruptions (node drains), when there are two. */ -}}
{{- define "edgegrid.pdb" -}}
{{- if gt (int .replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "edgegrid.labels" . | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
      app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}
{{- end -}}
