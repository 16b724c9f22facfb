{{/* The chart's name. */}}
{{- define "cascade.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* `<release>-cascade` (or the release name when it already holds the chart's), at most 40
characters so that every object name built from it stays a valid DNS label. */}}
{{- define "cascade.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "cascade.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that never change for an object: selectors and volume claim templates (which
are immutable, so a chart-version label there would break `helm upgrade`). Call with
(dict "root" $ "component" "ingest"). */}}
{{- define "cascade.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cascade.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every object's labels. Call with (dict "root" $ "component" "ingest"). */}}
{{- define "cascade.labels" -}}
{{ include "cascade.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: cascade
{{- end -}}

{{- define "cascade.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The gateway's Service, which stage workers, hooks and clients call. */}}
{{- define "cascade.gatewayHost" -}}
{{ include "cascade.fullname" . }}-ingest
{{- end -}}

{{- define "cascade.gatewayUrl" -}}
http://{{ include "cascade.gatewayHost" . }}:{{ .Values.ports.grpc }}
{{- end -}}

{{/* Whether the chart installs its own NATS. */}}
{{- define "cascade.natsBundled" -}}
{{- if and (eq .Values.mode "distributed") (not .Values.nats.external.url) (not .Values.nats.external.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* A Kubernetes name part from a pipeline or stage name: the resource manager's rule
(lowercase; every character other than a-z, 0-9 and - becomes -). */}}
{{- define "cascade.dnsLabel" -}}
{{- regexReplaceAll "[^a-z0-9-]" (lower .) "-" -}}
{{- end -}}

{{/* The Deployment of a stage, named as the resource manager scales it; the name template
(with {pipeline} and {stage}) is what the settings give the manager. */}}
{{- define "cascade.stageDeploymentTemplate" -}}
{{ include "cascade.fullname" . }}-stage-{pipeline}-{stage}
{{- end -}}

{{/* Call with (dict "root" $ "pipeline" "orders" "stage" "ship"). Fails when the name
cannot be a Deployment name. */}}
{{- define "cascade.stageDeployment" -}}
{{- $name := include "cascade.stageDeploymentTemplate" .root | replace "{pipeline}" (include "cascade.dnsLabel" .pipeline) | replace "{stage}" (include "cascade.dnsLabel" .stage) -}}
{{- if gt (len $name) 63 -}}
{{- fail (printf "pipelines: stage %s of pipeline %s makes the Deployment name %s, %d characters; Kubernetes allows 63: shorten the pipeline or stage name, or fullnameOverride" .stage .pipeline $name (len $name)) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "pipelines: stage %s of pipeline %s makes the Deployment name %s, which must begin and end with a letter or digit" .stage .pipeline $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* The settings every Cascade service reads (cascade.json): the values' `config` and
`pipelines`, plus the keys the chart owns (addresses, data directory, bus, executor). JSON,
because Helm writes numbers exactly only there. */}}
{{- define "cascade.settings" -}}
{{- $settings := deepCopy .Values.config -}}
{{- $distributed := eq .Values.mode "distributed" -}}
{{- $_ := set $settings "bus" (merge (dict "kind" (ternary "nats" "local" $distributed) "url" (ternary (include "cascade.natsUrl" .) "nats://127.0.0.1:4222" $distributed)) $settings.bus) -}}
{{- $_ := set $settings "grpc" (merge (dict "addr" (printf "0.0.0.0:%v" .Values.ports.grpc)) $settings.grpc) -}}
{{- $_ := set $settings "http" (dict "addr" (printf "0.0.0.0:%v" .Values.ports.admin)) -}}
{{- $_ := set $settings "data" (dict "dir" "/var/lib/cascade") -}}
{{- $_ := set $settings.dispatcher "shards" list -}}
{{- $_ := set $settings "timer" (merge (dict "shards" list) $settings.timer) -}}
{{- $kubernetes := dict "namespace" "" "deployment" (include "cascade.stageDeploymentTemplate" .) "deployments" dict -}}
{{- $_ := set $settings.resource_manager "executor" (ternary "kubernetes" "local" $distributed) -}}
{{- $_ := set $settings.resource_manager "kubernetes" $kubernetes -}}
{{- $_ := set $settings "pipelines" .Values.pipelines -}}
{{- toPrettyJson $settings -}}
{{- end -}}

{{/* The bundled NATS's URL (a Secret's URL comes in through the environment instead). */}}
{{- define "cascade.natsUrl" -}}
{{- if include "cascade.natsBundled" . -}}
nats://{{ include "cascade.fullname" . }}-nats:4222
{{- else -}}
{{- .Values.nats.external.url | default "nats://127.0.0.1:4222" -}}
{{- end -}}
{{- end -}}

{{/* Rolls pods when their settings change. */}}
{{- define "cascade.configChecksum" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- end -}}

{{/* Pod-level security and scheduling shared by every pod. */}}
{{- define "cascade.podSpecCommon" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.securityContext.runAsUser }}
  runAsGroup: {{ .Values.securityContext.runAsGroup }}
  fsGroup: {{ .Values.securityContext.fsGroup }}
  fsGroupChangePolicy: OnRootMismatch
  seccompProfile:
    type: RuntimeDefault
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Every container's security context. */}}
{{- define "cascade.containerSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.securityContext.runAsUser }}
  runAsGroup: {{ .Values.securityContext.runAsGroup }}
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  privileged: false
  capabilities:
    drop:
      - ALL
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{/* Liveness and readiness on the admin port. */}}
{{- define "cascade.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: admin
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: admin
  periodSeconds: 5
  timeoutSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/* A component's environment: its trace identity and export, the NATS URL from a Secret,
and the addresses and data directory of the settings again (the image sets defaults for
`docker run` in the environment, which would otherwise win over the settings file).
Call with (dict "root" $ "service" "cascade-ingest"). */}}
{{- define "cascade.env" -}}
- name: CASCADE__GRPC__ADDR
  value: {{ printf "0.0.0.0:%v" .root.Values.ports.grpc | quote }}
- name: CASCADE__HTTP__ADDR
  value: {{ printf "0.0.0.0:%v" .root.Values.ports.admin | quote }}
- name: CASCADE__DATA__DIR
  value: /var/lib/cascade
- name: OTEL_SERVICE_NAME
  value: {{ .service }}
{{- with .root.Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- if .root.Values.nats.external.existingSecret }}
- name: CASCADE__BUS__URL
  valueFrom:
    secretKeyRef:
      name: {{ .root.Values.nats.external.existingSecret }}
      key: {{ .root.Values.nats.external.existingSecretKey }}
{{- end }}
{{- end -}}

{{/* The settings volume and the writable /tmp that a read-only root filesystem needs. */}}
{{- define "cascade.volumes" -}}
- name: config
  configMap:
    name: {{ include "cascade.fullname" . }}-config
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}

{{- define "cascade.volumeMounts" -}}
- name: config
  mountPath: /etc/cascade
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "cascade.containerPorts" -}}
- name: admin
  containerPort: {{ .Values.ports.admin }}
  protocol: TCP
{{- end -}}

{{/* NATS's max_payload: the gateway's largest payload plus 1 MiB for the message around it. */}}
{{- define "cascade.natsMaxPayload" -}}
{{- $text := toString .Values.config.ingest.max_payload -}}
{{- $units := dict "B" 1 "kB" 1000 "MB" 1000000 "GB" 1000000000 "TB" 1000000000000 "KiB" 1024 "MiB" 1048576 "GiB" 1073741824 "TiB" 1099511627776 -}}
{{- $number := regexFind "^[0-9]+" $text -}}
{{- $unit := trimPrefix $number $text | trim | default "B" -}}
{{- if or (not $number) (not (hasKey $units $unit)) -}}
{{- fail (printf "config.ingest.max_payload: '%s' is not a size like 4MiB" $text) -}}
{{- end -}}
{{- $bytes := add (mul (atoi $number) (get $units $unit)) 1048576 -}}
{{- if gt $bytes 67108864 -}}
{{- fail (printf "config.ingest.max_payload: %s needs a NATS max_payload of %d bytes; NATS allows 64 MiB" $text $bytes) -}}
{{- end -}}
{{- $bytes -}}
{{- end -}}

{{/* A pod template's metadata: the component's labels (and `extraLabels`, if given), the
settings checksum (pods roll when their settings change) and the values' podAnnotations.
Call with (dict "root" $ "component" "ingest"). */}}
{{- define "cascade.podMetadata" -}}
labels:
  {{- include "cascade.labels" . | nindent 2 }}
  {{- with .extraLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  {{- include "cascade.configChecksum" .root | nindent 2 }}
  {{- with .root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* A store-keeping pod is ready only once its log is replayed: the startup check allows
that long. */}}
{{- define "cascade.startupProbe" -}}
startupProbe:
  httpGet:
    path: /readyz
    port: admin
  periodSeconds: {{ .Values.shards.startupProbe.periodSeconds }}
  timeoutSeconds: 5
  failureThreshold: {{ .Values.shards.startupProbe.failureThreshold }}
{{- end -}}

{{/* The volume claim of a store-keeping pod, with only labels that never change (claim
templates are immutable). Call with (dict "root" $ "component" "dispatcher" "storage"
.Values.shards.dispatcher.storage). */}}
{{- define "cascade.dataClaim" -}}
- metadata:
    name: data
    labels:
      {{- include "cascade.selectorLabels" . | nindent 6 }}
  spec:
    accessModes: ["ReadWriteOnce"]
    {{- with .storage.storageClassName }}
    storageClassName: {{ . }}
    {{- end }}
    resources:
      requests:
        storage: {{ .storage.size }}
{{- end -}}
