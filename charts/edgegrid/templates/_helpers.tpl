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

{{- /* Where a cloud component's pods may run. Called with dict "root" $ "values" <component
values>. Always on nodes carrying cloudNodeSelector's labels (a required nodeSelector, ANDed
with the component's own nodeSelector and affinity), which must be keys no kubelet may set
on its own Node (NodeRestriction refuses node-role.kubernetes.io/ and
node-restriction.kubernetes.io/ keys to kubelets): a compromised edge node can then never
attract a cloud pod, and its token, Secrets or keys, by relabelling itself or inflating its
allocatable. Tolerations: cloudTolerations plus the component's own. */ -}}
{{- define "edgegrid.scheduling" -}}
{{- $values := .values }}
{{- include "edgegrid.checkCloudNodeSelector" .root }}
nodeSelector:
  {{- toYaml (merge (dict) (include "edgegrid.cloudNodeSelector" .root | fromYaml) ($values.nodeSelector | default dict)) | nindent 2 }}
{{- with $values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with concat (.root.Values.cloudTolerations | default list) ($values.tolerations | default list) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{- /* cloudNodeSelector, or the control-plane role when it is empty (a map of its own, not a
default one: Helm merges a user's map into a default map, so a default key could not be
replaced). */ -}}
{{- define "edgegrid.cloudNodeSelector" -}}
{{- toYaml (.Values.cloudNodeSelector | default (dict "node-role.kubernetes.io/control-plane" "")) }}
{{- end -}}

{{- /* Refuses a cloudNodeSelector a kubelet could satisfy by labelling its own Node. */ -}}
{{- define "edgegrid.checkCloudNodeSelector" -}}
{{- range $key, $_ := .Values.cloudNodeSelector }}
{{- if not (or (hasPrefix "node-role.kubernetes.io/" $key) (hasPrefix "node-restriction.kubernetes.io/" $key)) }}
{{- fail (printf "cloudNodeSelector key %q: a kubelet may set it on its own Node, so a compromised edge node could attract the cloud components (their tokens, Secrets and the unit signer's key); use a node-role.kubernetes.io/ or node-restriction.kubernetes.io/ key (NodeRestriction refuses both to kubelets), e.g. kubectl label node NAME node-restriction.kubernetes.io/edgegrid-cloud=true" $key) }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* The nodeSelector of a per-node component: edgeNodeSelector's labels and the
component's own (its values' nodeSelector, which wins on a shared key). A component's own
labels move nodes over one at a time, e.g. from SuperEdge's daemon of the same job
(docs/migrating-from-superedge.md). Called with dict "root" $ "values" <component values>. */ -}}
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

{{- /* The unit label keys the unit label policy keeps to an administrator, as a CEL list:
edgeHealth.unitLabelKey (when set) and unitLabelPolicy.labelKeys (grids' gridUniqKeys). */ -}}
{{- define "edgegrid.unitLabelKeys" -}}
{{- $keys := .Values.unitLabelPolicy.labelKeys | default list }}
{{- with .Values.edgeHealth.unitLabelKey }}{{ $keys = append $keys . }}{{ end }}
{{- $keys | uniq | toJson }}
{{- end -}}
