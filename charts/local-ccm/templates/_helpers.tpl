{{/*
Names are fixed, not derived from the release: the node-scope admission policy names the agent's
ServiceAccount, and the static deploy/ manifests are this chart rendered as-is.
*/}}

{{- define "local-ccm.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: local-ccm
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{/*
A pod template's metadata: the component's podLabels under the chart's labels (which the selector needs, so
they win), and its podAnnotations. Input: dict "name" <program> "root" $ "pod" <component's values>.
*/}}
{{- define "local-ccm.podMetadata" -}}
labels:
  {{- merge (include "local-ccm.labels" . | fromYaml) (.pod.podLabels | default dict) | toYaml | nindent 2 }}
{{- with .pod.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
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
{{- $value := include "local-ccm.value" (dict "root" $.root "path" .value) }}
{{- if ne $value .default }}
- {{ printf "--%s=%s" .flag $value | toJson }}
{{- end }}
{{- end }}
{{- end }}

{{/* The controllers node-lifecycle-controller runs (controllers.yaml): those without a Helm switch, and those whose
switch is on; as JSON (fromJsonArray). */}}
{{- define "local-ccm.hostedControllers" -}}
{{- $running := list }}
{{- range (.Files.Get "controllers.yaml" | fromYaml).controllers }}
{{- if or (not .helmEnabled) (eq (include "local-ccm.anyTrue" (dict "root" $ "paths" .helmEnabled)) "true") }}
{{- $running = append $running . }}
{{- end }}
{{- end }}
{{- toJson $running }}
{{- end }}

{{/* "true" when any of the values at these dotted paths is true (a controller's helmEnabled), else "false".
Input: dict "root" $ "paths" <list>. */}}
{{- define "local-ccm.anyTrue" -}}
{{- $on := false }}
{{- range .paths }}{{ if eq (include "local-ccm.value" (dict "root" $.root "path" .)) "true" }}{{ $on = true }}{{ end }}{{ end }}
{{- $on }}
{{- end }}

{{/* Whether values set anything at a dotted path ("true" or ""). Input: dict "values" <map> "path" <dotted>. */}}
{{- define "local-ccm.isSet" -}}
{{- $node := .values }}
{{- $found := true }}
{{- range splitList "." .path }}
{{- if and $found (kindIs "map" $node) (hasKey $node .) }}{{ $node = index $node . }}{{ else }}{{ $found = false }}{{ end }}
{{- end }}
{{- if $found }}true{{ end }}
{{- end }}

{{/*
Where a value is read: its old name (renamed.yaml) when the user set that, else the path itself. values.yaml no
longer holds old names, so an old key is there only when set. Input: dict "root" $ "path" <dotted>.
*/}}
{{- define "local-ccm.valuePath" -}}
{{- $path := .path }}
{{- range $old, $new := (.root.Files.Get "renamed.yaml" | fromYaml).renamed }}
{{- if or (eq $.path $new) (hasPrefix (printf "%s." $new) $.path) }}
{{- $oldPath := printf "%s%s" $old (trimPrefix $new $.path) }}
{{- if include "local-ccm.isSet" (dict "values" $.root.Values "path" $oldPath) }}{{ $path = $oldPath }}{{ end }}
{{- end }}
{{- end }}
{{- $path }}
{{- end }}

{{/*
The values of a section (e.g. "agent") with those set under its old name (renamed.yaml) over them, as JSON
(fromJson), for templates that read a section's values directly. Input: dict "root" $ "path" <dotted>.
*/}}
{{- define "local-ccm.section" -}}
{{- $sections := list .path }}
{{- range $old, $new := (.root.Files.Get "renamed.yaml" | fromYaml).renamed }}
{{- if and (eq $new $.path) (include "local-ccm.isSet" (dict "values" $.root.Values "path" $old)) }}
{{- $sections = append $sections $old }}
{{- end }}
{{- end }}
{{- $merged := dict }}
{{- range $sections }}
{{- $section := $.root.Values }}
{{- range splitList "." . }}{{ $section = index $section . }}{{ end }}
{{- $merged = mergeOverwrite $merged (deepCopy $section) }}
{{- end }}
{{- toJson $merged }}
{{- end }}

{{/*
The value at a dotted path (read under its old name when that is set: local-ccm.valuePath) as the flag would
be written. Values files give whole numbers as float64: print them as integers, never 1e+06. A YAML list
(values file, --set 'a={x,y}') is the flag's comma list; a string is passed as written, so comma strings keep
working. Input: dict "root" $ "path" <dotted>.
*/}}
{{- define "local-ccm.value" -}}
{{- $value := .root.Values }}
{{- range splitList "." (include "local-ccm.valuePath" .) }}
{{- $value = index $value . }}
{{- end }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}
{{- $value = int64 $value }}
{{- end }}
{{- if kindIs "slice" $value }}
{{- $value = join "," $value }}
{{- end }}
{{- $value }}
{{- end }}

{{/*
A Go duration ("1m30s", "500ms", "0") in seconds, as a float. The schema has checked its form; units are
tried longest first, so "ms" is never "m" then "s".
*/}}
{{- define "local-ccm.durationSeconds" -}}
{{- $units := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "μs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $seconds := 0.0 }}
{{- range regexFindAll "[0-9]*\\.?[0-9]*(ns|us|µs|μs|ms|s|m|h)" . -1 }}
{{- $unit := regexFind "(ns|us|µs|μs|ms|s|m|h)$" . }}
{{- $seconds = addf $seconds (mulf (float64 (trimSuffix $unit .)) (get $units $unit)) }}
{{- end }}
{{- $seconds }}
{{- end }}

{{/*
An IPv4-mapped IPv6 address or CIDR (::ffff:10.0.0.1, 0::ffff:a00:1/120), among those the schema's ip and cidr
patterns accept: kube-apiserver and the programs refuse it, and it has too many spellings to leave out of
those patterns. test/deploy/schema-patterns.test.ts checks the two together against the programs.
*/}}
{{- define "local-ccm.ipv4MappedIPv6" -}}
^((0{1,4}:){5}|(0{1,4}:){0,4}:(0{1,4}:){0,4}|::(0{1,4}:){0,4})[fF]{4}:((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}|[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}|:|[0-9A-Fa-f]{1,4}::|:[0-9A-Fa-f]{1,4})(/[0-9]+)?$
{{- end }}

{{/*
Options the programs refuse together, or that they read as numbers out of range, fail the render with one
line naming the values (helm template and helm install exit non-zero), instead of pods that crash-loop
while Helm reports "deployed". Each mirrors a check of the programs' flag parsing (src/agent/flags.ts,
src/manager/flags.ts and the controllers' flags.ts);
the schema has checked each value's form.
*/}}
{{- define "local-ccm.checks" -}}
{{- $flags := .Files.Get "flags.yaml" | fromYaml }}
{{- $programs := list "local-ccm" }}
{{- if .Values.nodeLifecycleController.enabled }}{{ $programs = append $programs "node-lifecycle-controller" }}{{ end }}
{{- range $program := $programs }}
{{- range index $flags $program }}
{{- $value := include "local-ccm.value" (dict "root" $ "path" .value) }}
{{- if hasKey . "maxSeconds" }}
{{- $seconds := include "local-ccm.durationSeconds" $value | float64 }}
{{- if gt $seconds .maxSeconds }}
{{- fail (printf "%s=%s: --%s is too long (at most %dh)" .value $value .flag (div (int .maxSeconds) 3600)) }}
{{- end }}
{{- if and (hasKey . "aboveSeconds") (le $seconds .aboveSeconds) }}
{{- fail (printf "%s=%s: --%s must be greater than 0" .value $value .flag) }}
{{- end }}
{{- if and (hasKey . "atLeastSeconds") (lt $seconds .atLeastSeconds) }}
{{- fail (printf "%s=%s: --%s must be at least %ds" .value $value .flag (int .atLeastSeconds)) }}
{{- end }}
{{- end }}
{{- if and (hasSuffix "healthBindAddress" .value) (gt (include "local-ccm.healthPort" $value | default "0" | int) 65535) }}
{{- fail (printf "%s=%s: the port must be at most 65535" .value $value) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* src/net/ip.ts ipProblem and cidrProblem: an IPv4-mapped IPv6 address is refused, as kube-apiserver refuses it. */}}
{{- $mapped := include "local-ccm.ipv4MappedIPv6" . }}
{{- $addressValues := list "ipDetection.internalIPTarget" "ipDetection.internalIPCIDR" "ipDetection.externalIPTarget" "ipDetection.externalIPCIDR" }}
{{- if .Values.nodeLifecycleController.enabled }}{{ $addressValues = append $addressValues "csrApproval.rules.ipAllowlist" }}{{ end }}
{{- range $path := $addressValues }}
{{- range splitList "," (include "local-ccm.value" (dict "root" $ "path" $path)) }}
{{- if regexMatch $mapped (trim .) }}
{{- fail (printf "%s: %q is an IPv4-mapped IPv6 address, which Kubernetes refuses: write it as IPv4" $path (trim .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* src/service/flags.ts parsePortRange: a range runs from its lower port (the schema checks each port). */}}
{{- if .Values.nodeLifecycleController.enabled }}
{{- range splitList "," (include "local-ccm.value" (dict "root" $ "path" "loadBalancer.reservedPorts")) }}
{{- $ends := splitList "-" (trim .) }}
{{- if and (eq (len $ends) 2) (gt (index $ends 0 | int) (index $ends 1 | int)) }}
{{- fail (printf "loadBalancer.reservedPorts: %q runs backwards: write a range from-to, lower port first" (trim .)) }}
{{- end }}
{{- end }}
{{- $ends := splitList "-" (trim (include "local-ccm.value" (dict "root" $ "path" "loadBalancer.nodePortRange"))) }}
{{- if and (eq (len $ends) 2) (gt (index $ends 0 | int) (index $ends 1 | int)) }}
{{- fail (printf "loadBalancer.nodePortRange: %q runs backwards: write a range from-to, lower port first" (join "-" $ends)) }}
{{- end }}
{{- end }}
{{- /* src/agent/flags.ts targetProblem: a target is an address to reach, never the unspecified one (all zeros). */}}
{{- range $path := list "ipDetection.internalIPTarget" "ipDetection.externalIPTarget" }}
{{- range splitList "," (include "local-ccm.value" (dict "root" $ "path" $path)) }}
{{- if regexMatch "^[0:.]+$" (trim .) }}
{{- fail (printf "%s: %q is the unspecified address, not a target" $path (trim .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* src/agent/flags.ts detection(): per address type, one method; a default left alone is not given. */}}
{{- range $type := list "internal" "external" }}
{{- $chosen := list }}
{{- range $method := list "Target" "CIDR" "Interface" }}
{{- $path := printf "ipDetection.%sIP%s" $type $method }}
{{- $flag := printf "%s-ip-%s" $type (lower $method) }}
{{- $value := include "local-ccm.value" (dict "root" $ "path" $path) }}
{{- range index $flags "local-ccm" }}
{{- if and (eq .flag $flag) (ne $value .default) (ne $value "") }}{{ $chosen = append $chosen $path }}{{ end }}
{{- end }}
{{- end }}
{{- if gt (len $chosen) 1 }}
{{- fail (printf "%s both choose how %s are found: set one" (join " and " $chosen) (ternary "InternalIPs" "ExternalIPs" (eq $type "internal"))) }}
{{- end }}
{{- end }}
{{- /* src/agent/flags.ts and src/pools/flags.ts: class-less Services over BGP need the speaker. */}}
{{- if and .Values.bgp.claimClassless (not .Values.bgp.enabled) }}
{{- fail "bgp.claimClassless needs bgp.enabled: class-less Services would go over BGP" }}
{{- end }}
{{- /* src/agent/flags.ts: pod CIDRs go over the speaker's sessions, and the condition follows their routes. */}}
{{- if and .Values.bgp.advertisePodCIDRs (not .Values.bgp.enabled) }}
{{- fail "bgp.advertisePodCIDRs needs bgp.enabled: the pod CIDRs go over the agents' BGP sessions" }}
{{- end }}
{{- if and .Values.bgp.networkUnavailableCondition (not .Values.bgp.advertisePodCIDRs) }}
{{- fail "bgp.networkUnavailableCondition needs bgp.advertisePodCIDRs: the condition follows the pod CIDRs' routes" }}
{{- end }}
{{- if .Values.nodeLifecycleController.enabled }}
{{- /* src/manager/flags.ts, the elector's own rule: lease duration > renew deadline > retry period. */}}
{{- $election := .Values.nodeLifecycleController.controller.leaderElection }}
{{- $lease := include "local-ccm.durationSeconds" $election.leaseDuration | float64 }}
{{- $renew := include "local-ccm.durationSeconds" $election.renewDeadline | float64 }}
{{- $retry := include "local-ccm.durationSeconds" $election.retryPeriod | float64 }}
{{- $prefix := "nodeLifecycleController.controller.leaderElection" }}
{{- if not (gt $lease $renew) }}
{{- fail (printf "%s.leaseDuration=%s must be longer than %s.renewDeadline=%s" $prefix $election.leaseDuration $prefix $election.renewDeadline) }}
{{- end }}
{{- if not (gt $renew $retry) }}
{{- fail (printf "%s.renewDeadline=%s must be longer than %s.retryPeriod=%s" $prefix $election.renewDeadline $prefix $election.retryPeriod) }}
{{- end }}
{{- /* src/manager/flags.ts: of the controllers that run, one at most claims Services without a class. */}}
{{- $lb := .Values.loadBalancer }}
{{- $classless := list }}
{{- if and $lb.nodeAddress.enabled $lb.claimClassless }}{{ $classless = append $classless "loadBalancer.claimClassless" }}{{ end }}
{{- if and (or $lb.l2.enabled .Values.bgp.enabled) $lb.l2.pools.claimClassless }}{{ $classless = append $classless "loadBalancer.l2.pools.claimClassless" }}{{ end }}
{{- if and .Values.bgp.enabled .Values.bgp.claimClassless }}{{ $classless = append $classless "bgp.claimClassless" }}{{ end }}
{{- if gt (len $classless) 1 }}
{{- fail (printf "%s %s claim Services without a loadBalancerClass: set one" (join " and " $classless) (ternary "both" "all" (eq (len $classless) 2))) }}
{{- end }}
{{- /* src/manager/flags.ts: "no controller enabled". */}}
{{- if not (include "local-ccm.hostedControllers" . | fromJsonArray) }}
{{- fail "nodeLifecycleController.nodeDeletion.enabled, csrApproval.enabled, loadBalancer.nodeAddress.enabled, loadBalancer.l2.enabled and bgp.enabled are all off: set nodeLifecycleController.enabled=false" }}
{{- end }}
{{- else if .Values.csrApproval.enabled }}
{{- fail "csrApproval.enabled needs nodeLifecycleController.enabled: the approver runs in the node-lifecycle-controller Deployment (nodeLifecycleController.nodeDeletion.enabled=false turns off node deletion alone)" }}
{{- else if .Values.loadBalancer.l2.enabled }}
{{- fail "loadBalancer.l2.enabled needs nodeLifecycleController.enabled: the pool controller runs in the node-lifecycle-controller Deployment (nodeLifecycleController.nodeDeletion.enabled=false turns off node deletion alone)" }}
{{- else if .Values.bgp.enabled }}
{{- fail "bgp.enabled needs nodeLifecycleController.enabled: the pool controller runs in the node-lifecycle-controller Deployment (nodeLifecycleController.nodeDeletion.enabled=false turns off node deletion alone)" }}
{{- end }}
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
The Secret holding secure metrics' certificate (tls.crt, tls.key; ca.crt to verify it): metrics.tlsSecretName,
else the one the chart makes (metrics.generateCertificate, templates/metrics.yaml); "" for a self-signed
certificate made at each start, or when the program's metrics are off or not secure.
Input: dict "root" $ "flags" <the program's flag values>.
*/}}
{{- define "local-ccm.metricsTlsSecret" -}}
{{- if and .flags.metricsBindAddress .flags.secureMetrics }}
{{- if .root.Values.metrics.tlsSecretName }}{{ .root.Values.metrics.tlsSecretName }}
{{- else if .root.Values.metrics.generateCertificate }}local-ccm-metrics-tls{{ end }}
{{- end }}
{{- end }}

{{/* The DNS name in the chart-made certificate for a program's metrics: its metrics Service's. Input: dict "root" $ "name" <program>. */}}
{{- define "local-ccm.metricsServerName" -}}
{{ .name }}-metrics.{{ .root.Release.Namespace }}.svc
{{- end }}

{{/*
Secure metrics' certificate, mounted from local-ccm.metricsTlsSecret: the flags, the volume and its mount.
Input: dict "root" $ "flags" <the program's flag values>. Each output is "" without a Secret.
*/}}
{{- define "local-ccm.metricsTlsArgs" -}}
{{- if include "local-ccm.metricsTlsSecret" . }}
- "--metrics-cert-file=/etc/local-ccm/metrics-tls/tls.crt"
- "--metrics-key-file=/etc/local-ccm/metrics-tls/tls.key"
{{- end }}
{{- end }}

{{- define "local-ccm.metricsTlsVolume" -}}
{{- with include "local-ccm.metricsTlsSecret" . -}}
volumes:
  - name: metrics-tls
    secret:
      secretName: {{ . }}
{{- end }}
{{- end }}

{{- define "local-ccm.metricsTlsMount" -}}
{{- if include "local-ccm.metricsTlsSecret" . -}}
volumeMounts:
  - name: metrics-tls
    mountPath: /etc/local-ccm/metrics-tls
    readOnly: true
{{- end }}
{{- end }}

{{/*
The container ports of a program: "health" (the probes') and, on an address of its own, "metrics".
Input: the program's flag values (agent or nodeLifecycleController.controller).
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

{{/*
Liveness and readiness probes on the named "health" port. Liveness restarts a process that stopped answering for a
minute (6 × 10 s, 5 s each), not one slow on a loaded node: with kubelet's 1 s timeout, agents on a 2-core node
taking in 1,000 new Services missed three probes in a row and were restarted, and each restart's relist loaded the
node more (bench:bgp).
*/}}
{{- define "local-ccm.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: health
  timeoutSeconds: 5
  periodSeconds: 10
  failureThreshold: 6
readinessProbe:
  httpGet:
    path: /readyz
    port: health
  timeoutSeconds: 5
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
{{- $value := include "local-ccm.value" (dict "root" . "path" $path) }}
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
CEL: the Node named by the authentication.kubernetes.io/node-name extra of the request's token (a
token bound to a Pod on that Node, as the agent's DaemonSet Pod gets), or "" when there is none.
*/}}
{{- define "local-ccm.ownNode" -}}
>-
        has(request.userInfo.extra) &&
        "authentication.kubernetes.io/node-name" in request.userInfo.extra &&
        size(request.userInfo.extra["authentication.kubernetes.io/node-name"]) == 1
        ? request.userInfo.extra["authentication.kubernetes.io/node-name"][0] : ""
{{- end }}

{{/* CEL: managedFields entries `a` and `b` (variable names) of the same manager, operation, version and time. */}}
{{- define "local-ccm.sameManagedFieldsEntry" -}}
{{- $a := .a }}{{ $b := .b }}
{{- $fields := list "manager" "operation" "apiVersion" "subresource" "time" "fieldsType" }}
{{- range $i, $field := $fields }}{{ if $i }} &&{{ if eq $i 3 }}
           {{ end }} {{ end }}{{ $a }}.?{{ $field }} == {{ $b }}.?{{ $field }}{{ end }}
{{- end }}

{{/*
CEL: whether a field manager's fieldsV1 `new` holds what `old` held, less at most what this write
changes (variables.ownershipLost: per fieldsV1 key of metadata.labels, metadata, spec and status, the
keys whose ownership the apiserver may take away). Labels are compared key by key (f:labels is no
metadata field of its own here); below another changed field the lost part may be a list item's
(status.addresses' k:{"type":…}/f:address): two levels are compared as subsets. `new` and `old` are
CEL expressions; the single-element lists bind them to names.
*/}}
{{- define "local-ccm.ownershipOnlyLost" -}}
[{{ .new }}].all(after, [{{ .old }}].all(before,
              after.all(k, k in before && (after[k] == before[k] || k in ["f:metadata", "f:spec", "f:status"])) &&
              before.all(k, k in after || k in ["f:metadata", "f:spec", "f:status"]) &&
              [after[?"f:metadata"][?"f:labels"].orValue({})].all(l,
                [before[?"f:metadata"][?"f:labels"].orValue({})].all(ol,
                  l.all(k, k in ol && l[k] == ol[k]) &&
                  ol.all(k, k in l || k in variables.ownershipLost["f:labels"]))) &&
              ["f:metadata", "f:spec", "f:status"].all(p, [after[?p].orValue({})].all(s, [before[?p].orValue({})].all(os,
                s.all(k, k in os && (s[k] == os[k] || k == "f:labels" || (k in variables.ownershipLost[p] &&
                  s[k].all(i, i in os[k] && (s[k][i] == os[k][i] ||
                    s[k][i].all(j, j in os[k][i] && s[k][i][j] == os[k][i][j])))))) &&
                os.all(k, k in s || k == "f:labels" || k in variables.ownershipLost[p]))))))
{{- end }}

{{/*
CEL: what is wrong with an Event written by the agent (input: its CEL name, "object" or "oldObject"),
as a list of "<field> \"<value>\"": it must be about Node variables.ownNode (no namespace, no related
object) and be reported by local-ccm from that Node, as the agent's recorder writes it; the source
(deprecatedSource) fields may be empty. variables.names gives the field names of the API the request
used. The single-element lists bind values to names.
*/}}
{{- define "local-ccm.eventProblems" -}}
[{{ . }}].map(ev, [ev[?variables.names.about].orValue({})].map(about,
          [ev[?variables.names.source].orValue({})].map(source, [
            {"field": [variables.names.about + ".kind"], "value": [about[?"kind"].orValue("")], "allowed": ["Node"]},
            {"field": [variables.names.about + ".name"], "value": [about[?"name"].orValue("")], "allowed": [variables.ownNode]},
            {"field": [variables.names.about + ".namespace"], "value": [about[?"namespace"].orValue("")], "allowed": [""]},
            {"field": ["related.kind"], "value": [ev[?"related"].orValue({})[?"kind"].orValue("")], "allowed": [""]},
            {"field": ["related.name"], "value": [ev[?"related"].orValue({})[?"name"].orValue("")], "allowed": [""]},
            {"field": [variables.names.reporter], "value": [ev[?variables.names.reporter].orValue("")], "allowed": ["local-ccm"]},
            {"field": ["reportingInstance"], "value": [ev[?"reportingInstance"].orValue("")], "allowed": [variables.ownNode]},
            {"field": [variables.names.source + ".component"], "value": [source[?"component"].orValue("")], "allowed": ["", "local-ccm"]},
            {"field": [variables.names.source + ".host"], "value": [source[?"host"].orValue("")], "allowed": ["", variables.ownNode]}
          ].filter(c, !(c.value[0] in c.allowed)).map(c, c.field[0] + " \"" + c.value[0] + "\""))[0])[0])[0]
{{- end }}

{{/*
CEL: a --protected-labels / --protected-annotations list ("key" or "key=value", comma-separated, blanks
around items, keys and values trimmed, empty items skipped, as src/kube/labelselector.ts reads it) as a
list of [key] and [key, value] lists.
*/}}
{{- define "local-ccm.keyValueMatchers" -}}
{{- $matchers := list }}
{{- range splitList "," (join "," .) }}
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

{{/*
CEL: whether fieldsV1 `inner` holds nothing that fieldsV1 `outer` lacks, compared key by key six levels
deep (a Node's fields go five deep) and as equal below. Input: dict "inner" <CEL> "outer" <CEL>. One
line per call: the text goes into a folded YAML scalar.
*/}}
{{- define "local-ccm.fieldsWithin" -}}
[{{ .inner }}].all(i0, [{{ .outer }}].all(o0, {{ include "local-ccm.fieldsWithinLevel" (dict "level" 0) }}))
{{- end }}

{{- define "local-ccm.fieldsWithinLevel" -}}
{{- $i := printf "i%d" .level }}{{ $o := printf "o%d" .level }}{{ $k := printf "k%d" .level }}
{{- if eq .level 6 -}}
{{ $i }} == {{ $o }}
{{- else -}}
{{- $next := add1 .level }}
{{- $i }}.all({{ $k }}, {{ $k }} in {{ $o }} && ({{ $i }}[{{ $k }}] == {{ $o }}[{{ $k }}] || [{{ $i }}[{{ $k }}]].all(i{{ $next }}, [{{ $o }}[{{ $k }}]].all(o{{ $next }}, {{ include "local-ccm.fieldsWithinLevel" (dict "level" $next) }}))))
{{- end }}
{{- end }}
