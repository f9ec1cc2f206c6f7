{{/*
Names are fixed, not derived from the release: the node-scope admission policy names the agent's
ServiceAccount, and the static deploy/ manifests are this chart rendered as-is.
*/}}

{{- define "local-ccm.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: local-ccm
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{- define "local-ccm.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Container args of a program: "--flag=value" for each of its flags (flags.yaml, generated from the
programs' flag tables) whose value differs from the flag's default, so a value left alone means
exactly "flag not given" (the default external target then cannot collide with a chosen
externalIPCIDR). Input: dict "root" $ "program" "<name>". Output: YAML list items, or "".
*/}}
{{- define "local-ccm.flagArgs" -}}
{{- range index (.root.Files.Get "flags.yaml" | fromYaml) .program }}
{{- $value := include "local-ccm.value" (dict "values" $.root.Values "path" .value) }}
{{- if ne $value .default }}
- {{ printf "--%s=%s" .flag $value | toJson }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The value at a dotted path as the flag would be written. Values files give whole numbers as float64:
print them as integers, never 1e+06.
*/}}
{{- define "local-ccm.value" -}}
{{- $value := .values }}
{{- range splitList "." .path }}
{{- $value = index $value . }}
{{- end }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
{{- $value }}
{{- end }}

{{/* A program's container command: node, Node's own flags (nodeFlags), the program's bundle. */}}
{{- define "local-ccm.command" -}}
{{ concat (list "node") .root.Values.nodeFlags (list (printf "/app/dist/%s.cjs" .program)) | toJson }}
{{- end }}

{{/* The port of a health bind address (":10263", "127.0.0.1:10263", "[::1]:10263"); "" when disabled. */}}
{{- define "local-ccm.healthPort" -}}
{{- regexFind "[0-9]+$" . }}
{{- end }}

{{/*
Secure metrics' certificate, mounted from metrics.tlsSecretName: the flags, the volume and its mount.
Input: the root context. Each output is "" without a Secret.
*/}}
{{- define "local-ccm.metricsTlsArgs" -}}
{{- if .Values.metrics.tlsSecretName }}
- "--metrics-cert-file=/etc/local-ccm/metrics-tls/tls.crt"
- "--metrics-key-file=/etc/local-ccm/metrics-tls/tls.key"
{{- end }}
{{- end }}

{{- define "local-ccm.metricsTlsVolume" -}}
{{- if .Values.metrics.tlsSecretName -}}
volumes:
  - name: metrics-tls
    secret:
      secretName: {{ .Values.metrics.tlsSecretName }}
{{- end }}
{{- end }}

{{- define "local-ccm.metricsTlsMount" -}}
{{- if .Values.metrics.tlsSecretName -}}
volumeMounts:
  - name: metrics-tls
    mountPath: /etc/local-ccm/metrics-tls
    readOnly: true
{{- end }}
{{- end }}

{{/*
The container ports of a program: "health" (the probes') and, on an address of its own, "metrics".
Input: the program's flag values (controller or nodeLifecycleController.controller).
*/}}
{{- define "local-ccm.ports" -}}
{{- $health := include "local-ccm.healthPort" .healthBindAddress }}
{{- $metrics := include "local-ccm.healthPort" .metricsBindAddress }}
{{- if or $health $metrics -}}
ports:
  {{- if $health }}
  - name: health
    containerPort: {{ $health }}
    protocol: TCP
  {{- end }}
  {{- if and $metrics (ne .metricsBindAddress .healthBindAddress) }}
  - name: metrics
    containerPort: {{ $metrics }}
    protocol: TCP
  {{- end }}
{{- end }}
{{- end }}

{{/* The port name /metrics is served on: "metrics", or "health" when both share an address; "" when off. */}}
{{- define "local-ccm.metricsPortName" -}}
{{- if .metricsBindAddress }}{{ if eq .metricsBindAddress .healthBindAddress }}health{{ else }}metrics{{ end }}{{ end }}
{{- end }}

{{/*
The review grants secure metrics need (TokenReview, SubjectAccessReview), as ClusterRole rules; "" when
the program's metrics are off or not secure. Input: the program's flag values.
*/}}
{{- define "local-ccm.metricsReviewRules" -}}
{{- if and .metricsBindAddress .secureMetrics -}}
# Secure metrics: each scraper's token is reviewed, then its access to /metrics.
- apiGroups: ["authentication.k8s.io"]
  resources: ["tokenreviews"]
  verbs: ["create"]
- apiGroups: ["authorization.k8s.io"]
  resources: ["subjectaccessreviews"]
  verbs: ["create"]
{{- end }}
{{- end }}

{{/* Liveness and readiness probes on the named "health" port. */}}
{{- define "local-ccm.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: health
readinessProbe:
  httpGet:
    path: /readyz
    port: health
{{- end }}

{{- define "local-ccm.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .runAsUser | int64 }}
runAsGroup: {{ .runAsGroup | int64 }}
seccompProfile:
  {{- toYaml .seccompProfile | nindent 2 }}
{{- end }}

{{/* Hardening shared by both containers; capabilities are added by the caller. */}}
{{- define "local-ccm.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
{{- end }}

{{/*
The Lease namespace of the node-lifecycle-controller: left at its default, the flag is not passed
and the program takes its pod's namespace.
*/}}
{{- define "local-ccm.leaseNamespace" -}}
{{- $path := "nodeLifecycleController.controller.leaderElection.resourceNamespace" }}
{{- $spec := dict }}
{{- range index (.Files.Get "flags.yaml" | fromYaml) "node-lifecycle-controller" }}
{{- if eq .value $path }}{{ $spec = . }}{{ end }}
{{- end }}
{{- $value := include "local-ccm.value" (dict "values" .Values "path" $path) }}
{{- if eq $value $spec.default }}{{ .Release.Namespace }}{{ else }}{{ $value }}{{ end }}
{{- end }}

{{/*
Events about Nodes, which are cluster-scoped, live in "default" (as kubelet's do): the programs may
create and patch Events there and nowhere else. Input: dict "name" <ServiceAccount> "root" $.
*/}}
{{- define "local-ccm.eventsGrant" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}-events
  namespace: default
  labels:
    {{- include "local-ccm.labels" . | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}-events
  namespace: default
  labels:
    {{- include "local-ccm.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}-events
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}
