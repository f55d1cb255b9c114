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
{{- /* How a ServiceMonitor endpoint reaches the agent: with auth, HTTPS
with the ServiceAccount token, verified by serviceMonitor.tls. */ -}}
{{- define "cgwarden.smAuth" -}}
{{- $tls := .Values.serviceMonitor.tls -}}
{{- if .Values.auth.enabled -}}
scheme: https
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
tlsConfig:
  {{- if $tls.caSecret.name }}
  ca:
    secret:
      name: {{ $tls.caSecret.name }}
      key: {{ $tls.caSecret.key }}
  {{- with $tls.serverName }}
  serverName: {{ . }}
  {{- end }}
  {{- else }}
  insecureSkipVerify: true
  {{- end }}
{{- end -}}
{{- end -}}
