{{- define "cgwarden.labels" -}}
app.kubernetes.io/name: cgwarden
app.kubernetes.io/part-of: cgwarden
{{- end -}}
{{- define "cgwarden.scheme" -}}
{{- if .Values.auth.enabled }}HTTPS{{ else }}HTTP{{ end -}}
{{- end -}}
{{- define "cgwarden.port" -}}
{{- if .Values.auth.enabled }}https{{ else }}http{{ end -}}
{{- end -}}
