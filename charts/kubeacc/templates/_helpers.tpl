{{/* Labels on every object of the release. */}}
{{- define "kubeacc.labels" -}}
app.kubernetes.io/part-of: kube-acc
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kubeacc.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Device types in device-plugin mode, as a list. */}}
{{- define "kubeacc.devicePluginTypes" -}}
{{- $types := list -}}
{{- range $type, $mode := .Values.modes -}}
{{- if eq $mode "device-plugin" }}{{ $types = append $types $type }}{{ end -}}
{{- end -}}
{{- toJson $types -}}
{{- end -}}

{{/* A manifest of deploy/ with the kube-system namespace replaced by the release's. */}}
{{- define "kubeacc.inNamespace" -}}
{{- .file | replace "namespace: kube-system" (printf "namespace: %s" .ns) | replace "system:serviceaccount:kube-system:" (printf "system:serviceaccount:%s:" .ns) -}}
{{- end -}}
