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
{{- /* --max-size from sizes.maxPerNamespace (NAMESPACE: CPU), entries in
the namespaces' order; empty when the map is. The agent and the sizer get
the same bounds: the agent caps the sizes it believes, the sizer its
requests (docs/sizing.md, "Per-namespace bounds"). */ -}}
{{- define "cgwarden.maxSize" -}}
{{- $entries := list -}}
{{- range $ns, $cpu := .Values.sizes.maxPerNamespace -}}
{{- $entries = append $entries (printf "%s=%v" $ns $cpu) -}}
{{- end -}}
{{- join "," $entries -}}
{{- end -}}
