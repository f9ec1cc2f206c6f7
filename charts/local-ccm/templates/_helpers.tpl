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

{{/*
CEL: a --protected-labels / --protected-annotations list ("key" or "key=value", comma-separated, blanks
around items, keys and values trimmed, empty items skipped, as src/kube/labelselector.ts reads it) as a
list of [key] and [key, value] lists.
*/}}
{{- define "local-ccm.keyValueMatchers" -}}
{{- $matchers := list }}
{{- range splitList "," . }}
{{- $item := trim . }}
{{- if $item }}
{{- $equals := regexFind "=" $item }}
{{- if $equals }}
{{- $key := regexReplaceAll "=.*$" $item "" }}
{{- $matchers = append $matchers (list (trim $key) (trim (trimPrefix (printf "%s=" $key) $item))) }}
{{- else }}
{{- $matchers = append $matchers (list $item) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* dyn: an empty list literal would otherwise be typed as a list of ints */}}
{{- printf "dyn(%s)" ($matchers | toJson) }}
{{- end }}
