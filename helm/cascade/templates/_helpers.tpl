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

{{/* The URL the chart's own clients (stage workers, hooks) call the gateway at: with TLS,
`https://` and the Service's name in the namespace, which the certificate must name. */}}
{{- define "cascade.gatewayUrl" -}}
{{- if .Values.tls.enabled -}}
https://{{ include "cascade.gatewayHost" . }}.{{ .Release.Namespace }}.svc:{{ .Values.ports.grpc }}
{{- else -}}
http://{{ include "cascade.gatewayHost" . }}:{{ .Values.ports.grpc }}
{{- end -}}
{{- end -}}

{{/* Where the secrets are mounted (top-level directories: a mount inside the read-only
settings volume could not be created). */}}
{{- define "cascade.identitiesFile" -}}/etc/cascade-identities/identities.toml{{- end -}}
{{- define "cascade.tlsDir" -}}/etc/cascade-tls{{- end -}}
{{- define "cascade.clientTlsDir" -}}/etc/cascade-client-tls{{- end -}}
{{- define "cascade.natsTlsDir" -}}/etc/cascade-nats-tls{{- end -}}

{{/* Refuses values that cannot make a working release, saying what to do. The chart never
creates credentials: they come from Secrets of your own, which upgrades leave alone. */}}
{{- define "cascade.validate" -}}
{{- if not (has .Values.mode (list "distributed" "standalone")) }}
{{- fail (printf "mode: '%s' is neither distributed nor standalone" .Values.mode) }}
{{- end }}
{{- if lt (int .Values.config.cluster.shards) 1 }}
{{- fail (printf "config.cluster.shards: must be at least 1, is %v (one dispatcher and one timer pod per shard)" .Values.config.cluster.shards) }}
{{- end }}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) }}
{{- fail (printf "auth.enabled is true (the default) and auth.existingSecret is empty; the chart generates no credentials. Create a Secret holding the identities file and the tokens of the chart's own clients, e.g.\n  kubectl -n %s create secret generic cascade-auth --from-file=identities.toml --from-literal=operator-token=\"$OPERATOR_TOKEN\" --from-literal=stage-worker-token=\"$STAGE_WORKER_TOKEN\"\nthen set auth.existingSecret=cascade-auth (docs/kubernetes.md shows an identities.toml for these tokens), or set auth.enabled=false" .Release.Namespace) }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail (printf "tls.enabled is true and tls.existingSecret is empty: create a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt (cert-manager makes one), whose certificate names %s.%s.svc, and set tls.existingSecret to its name" (include "cascade.gatewayHost" .) .Release.Namespace) }}
{{- end }}
{{- if and .Values.tls.clientAuth (not .Values.tls.enabled) }}
{{- fail "tls.clientAuth is true and tls.enabled is false: mutual TLS needs TLS; set tls.enabled=true and tls.existingSecret" }}
{{- end }}
{{- if and .Values.tls.clientAuth (not .Values.tls.clientSecret) }}
{{- fail "tls.clientAuth is true and tls.clientSecret is empty: the chart's own clients (stage workers, the pipelines Job, the helm test Pod) must present a certificate signed by the CA of tls.existingSecret's ca.crt: create a kubernetes.io/tls Secret with it (tls.crt, tls.key) and set tls.clientSecret to its name" }}
{{- end }}
{{- if and .Values.nats.tls.existingSecret (include "cascade.natsBundled" .) }}
{{- fail "nats.tls.existingSecret is set but no NATS of your own is (nats.external.url or nats.external.existingSecret): the bundled NATS speaks no TLS" }}
{{- end }}
{{- with .Values.nats.auth }}
{{- if and .existingSecret (not .tokenKey) (not (and .userKey .passwordKey)) }}
{{- fail "nats.auth.existingSecret is set with no key to read: set nats.auth.tokenKey, or nats.auth.userKey and nats.auth.passwordKey" }}
{{- end }}
{{- end }}
{{- end -}}

{{/* `<pod IP>:port` (from the POD_IP variable that cascade.podIpEnv sets) or every
interface, per bindToPodIP. Call with (dict "root" $ "port" 7700). */}}
{{- define "cascade.bindAddr" -}}
{{- if .root.Values.bindToPodIP -}}
$(POD_IP):{{ .port }}
{{- else -}}
0.0.0.0:{{ .port }}
{{- end -}}
{{- end -}}

{{- define "cascade.podIpEnv" -}}
{{- if .Values.bindToPodIP }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
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
{{- $busTls := dict -}}
{{- if and $distributed .Values.nats.tls.existingSecret -}}
{{- $_ := set $busTls "ca_file" (printf "%s/ca.crt" (include "cascade.natsTlsDir" .)) -}}
{{- if .Values.nats.tls.clientCertificate -}}
{{- $_ := set $busTls "cert_file" (printf "%s/tls.crt" (include "cascade.natsTlsDir" .)) -}}
{{- $_ := set $busTls "key_file" (printf "%s/tls.key" (include "cascade.natsTlsDir" .)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $settings "bus" (merge (dict "kind" (ternary "nats" "local" $distributed) "url" (ternary (include "cascade.natsUrl" .) "nats://127.0.0.1:4222" $distributed) "tls" $busTls) $settings.bus) -}}
{{- /* Every interface here; each pod's environment binds to its IP (bindToPodIP). */ -}}
{{- $_ := set $settings "grpc" (merge (dict "addr" (printf "0.0.0.0:%v" .Values.ports.grpc)) $settings.grpc) -}}
{{- if .Values.tls.enabled -}}
{{- $_ := set $settings.grpc.tls "cert_file" (printf "%s/tls.crt" (include "cascade.tlsDir" .)) -}}
{{- $_ := set $settings.grpc.tls "key_file" (printf "%s/tls.key" (include "cascade.tlsDir" .)) -}}
{{- if .Values.tls.clientAuth -}}
{{- $_ := set $settings.grpc.tls "client_ca_file" (printf "%s/ca.crt" (include "cascade.tlsDir" .)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $settings "http" (dict "addr" (printf "0.0.0.0:%v" .Values.ports.admin)) -}}
{{- $_ := set $settings "auth" (merge (dict "enabled" .Values.auth.enabled "handler_url_prefixes" (include "cascade.handlerUrlPrefixes" . | fromJsonArray)) $settings.auth) -}}
{{- if .Values.auth.enabled -}}
{{- $_ := set $settings.auth "identities_file" (include "cascade.identitiesFile" .) -}}
{{- end -}}
{{- $_ := set $settings "data" (dict "dir" "/var/lib/cascade") -}}
{{- $_ := set $settings.dispatcher "shards" list -}}
{{- $_ := set $settings "timer" (merge (dict "shards" list) $settings.timer) -}}
{{- $kubernetes := dict "namespace" "" "deployment" (include "cascade.stageDeploymentTemplate" .) "deployments" dict -}}
{{- $_ := set $settings.resource_manager "executor" (ternary "kubernetes" "local" $distributed) -}}
{{- $_ := set $settings.resource_manager "kubernetes" $kubernetes -}}
{{- $_ := set $settings "pipelines" .Values.pipelines -}}
{{- toPrettyJson $settings -}}
{{- end -}}

{{/* The allow-list of handler URLs: auth.handlerUrlPrefixes, and with authentication on the
handlers of the values' pipelines, which are the operator's as a settings file's are (the
pipelines Job applies them over gRPC, where the list is checked). JSON. */}}
{{- define "cascade.handlerUrlPrefixes" -}}
{{- $prefixes := list -}}
{{- range .Values.auth.handlerUrlPrefixes -}}
{{- $prefixes = append $prefixes . -}}
{{- end -}}
{{- range $pipeline := ternary .Values.pipelines list .Values.auth.enabled -}}
{{- range $stage := $pipeline.stages -}}
{{- $kind := $stage.handler.kind | default dict -}}
{{- $url := "" -}}
{{- if $kind.http }}{{ $url = $kind.http.url }}{{ end -}}
{{- if $kind.grpc }}{{ $url = $kind.grpc.endpoint }}{{ end -}}
{{- if and $url (not (has $url $prefixes)) -}}
{{- $prefixes = append $prefixes $url -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $prefixes -}}
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

{{/* The environment of a service that reads the settings (gateway, shards, resource
manager, standalone): the addresses, bound to the pod's IP, and data directory of the
settings again (the image sets defaults for `docker run` in the environment, which would
otherwise win over the settings file), its trace identity and export, and in the distributed
mode the NATS URL and credentials from their Secrets.
Call with (dict "root" $ "service" "cascade-ingest"). */}}
{{- define "cascade.env" -}}
{{- include "cascade.podIpEnv" .root }}
- name: CASCADE__GRPC__ADDR
  value: {{ include "cascade.bindAddr" (dict "root" .root "port" .root.Values.ports.grpc) | quote }}
- name: CASCADE__HTTP__ADDR
  value: {{ include "cascade.bindAddr" (dict "root" .root "port" .root.Values.ports.admin) | quote }}
- name: CASCADE__DATA__DIR
  value: /var/lib/cascade
{{- include "cascade.traceEnv" . }}
{{- if eq .root.Values.mode "distributed" }}
{{- include "cascade.natsEnv" .root }}
{{- end }}
{{- end -}}

{{/* Call with (dict "root" $ "service" "cascade-ingest"). */}}
{{- define "cascade.traceEnv" }}
- name: OTEL_SERVICE_NAME
  value: {{ .service }}
{{- with .root.Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The NATS URL with its credentials, and credentials apart from the URL, from Secrets. */}}
{{- define "cascade.natsEnv" -}}
{{- if .Values.nats.external.existingSecret }}
- name: CASCADE__BUS__URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.nats.external.existingSecret }}
      key: {{ .Values.nats.external.existingSecretKey }}
{{- end }}
{{- with .Values.nats.auth }}
{{- if .existingSecret }}
{{- range $variable, $key := ternary (dict "CASCADE__BUS__TOKEN" .tokenKey) (dict "CASCADE__BUS__USER" .userKey "CASCADE__BUS__PASSWORD" .passwordKey) (not (empty .tokenKey)) }}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.nats.auth.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A stage worker's environment: its admin port bound to the pod's IP, its trace identity
and its token (the stage worker reads `CASCADE__STAGE_WORKER__*`, not the services'
settings). */}}
{{- define "cascade.stageWorkerEnv" -}}
{{- include "cascade.podIpEnv" . }}
- name: CASCADE__STAGE_WORKER__HTTP_ADDR
  value: {{ include "cascade.bindAddr" (dict "root" . "port" .Values.ports.admin) | quote }}
{{- include "cascade.traceEnv" (dict "root" . "service" "cascade-stage-worker") }}
{{- if .Values.auth.enabled }}
- name: CASCADE__STAGE_WORKER__TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.auth.existingSecret }}
      key: stage-worker-token
{{- end }}
{{- end -}}

{{/* The environment of a pod running the `cascade` CLI against the gateway (the pipelines
Job, the `helm test` Pod): its address, the operator's token, the CA and client certificate. */}}
{{- define "cascade.clientEnv" -}}
- name: CASCADE_ADDR
  value: {{ include "cascade.gatewayUrl" . }}
{{- if .Values.auth.enabled }}
- name: CASCADE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.auth.existingSecret }}
      key: operator-token
{{- end }}
{{- if .Values.tls.enabled }}
- name: CASCADE_CA
  value: {{ include "cascade.clientTlsDir" . }}/ca.crt
{{- if .Values.tls.clientAuth }}
- name: CASCADE_CERT
  value: {{ include "cascade.clientTlsDir" . }}/tls.crt
- name: CASCADE_KEY
  value: {{ include "cascade.clientTlsDir" . }}/tls.key
{{- end }}
{{- end }}
{{- end -}}

{{/* The stage worker's `gateway_tls`: the gateway's CA, and the client certificate for
mutual TLS. Empty without TLS. */}}
{{- define "cascade.gatewayTls" -}}
{{- $tls := dict -}}
{{- if .Values.tls.enabled -}}
{{- $_ := set $tls "ca_file" (printf "%s/ca.crt" (include "cascade.clientTlsDir" .)) -}}
{{- if .Values.tls.clientAuth -}}
{{- $_ := set $tls "cert_file" (printf "%s/tls.crt" (include "cascade.clientTlsDir" .)) -}}
{{- $_ := set $tls "key_file" (printf "%s/tls.key" (include "cascade.clientTlsDir" .)) -}}
{{- end -}}
{{- end -}}
{{- toJson $tls -}}
{{- end -}}

{{/* The settings volume, the writable /tmp that a read-only root filesystem needs, and the
Secrets a pod of `role` needs: `gateway` (the gateway, standalone: the identities, the
certificate, NATS's CA), `service` (shards, resource manager: the identities, which every
service loads, and NATS's CA), `client` (stage workers, pipelines Job: the gateway's CA
and client certificate). Call with (dict "root" $ "role" "gateway"). Each Secret is
mounted as a directory, whose files Kubernetes updates when the Secret changes (the
services read them again: rotation without a restart). */}}
{{- define "cascade.volumes" -}}
- name: config
  configMap:
    name: {{ include "cascade.fullname" .root }}-config
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- include "cascade.secretVolumes" . }}
{{- end -}}

{{- define "cascade.volumeMounts" -}}
- name: config
  mountPath: /etc/cascade
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- include "cascade.secretVolumeMounts" . }}
{{- end -}}

{{/* The Secret volumes alone, for (dict "root" $ "role" ...); see cascade.volumes. */}}
{{- define "cascade.secretVolumes" -}}
{{- $values := .root.Values -}}
{{- $server := eq .role "gateway" -}}
{{- $client := eq .role "client" -}}
{{- if and $values.auth.enabled (not $client) }}
- name: identities
  secret:
    secretName: {{ $values.auth.existingSecret }}
    defaultMode: 0440
    items:
      - key: identities.toml
        path: identities.toml
{{- end }}
{{- if and $values.tls.enabled $server }}
- name: tls
  secret:
    secretName: {{ $values.tls.existingSecret }}
    defaultMode: 0440
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- if $values.tls.clientAuth }}
      - key: ca.crt
        path: ca.crt
      {{- end }}
{{- end }}
{{- if and $values.tls.enabled $client }}
- name: client-tls
  projected:
    defaultMode: 0440
    sources:
      - secret:
          name: {{ $values.tls.existingSecret }}
          items:
            - key: ca.crt
              path: ca.crt
      {{- if $values.tls.clientAuth }}
      - secret:
          name: {{ $values.tls.clientSecret }}
          items:
            - key: tls.crt
              path: tls.crt
            - key: tls.key
              path: tls.key
      {{- end }}
{{- end }}
{{- if and (eq $values.mode "distributed") $values.nats.tls.existingSecret (not $client) }}
- name: nats-tls
  secret:
    secretName: {{ $values.nats.tls.existingSecret }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
      {{- if $values.nats.tls.clientCertificate }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
{{- end }}
{{- end -}}

{{- define "cascade.secretVolumeMounts" -}}
{{- $values := .root.Values -}}
{{- $client := eq .role "client" -}}
{{- if and $values.auth.enabled (not $client) }}
- name: identities
  mountPath: {{ include "cascade.identitiesFile" .root | dir }}
  readOnly: true
{{- end }}
{{- if and $values.tls.enabled (eq .role "gateway") }}
- name: tls
  mountPath: {{ include "cascade.tlsDir" .root }}
  readOnly: true
{{- end }}
{{- if and $values.tls.enabled $client }}
- name: client-tls
  mountPath: {{ include "cascade.clientTlsDir" .root }}
  readOnly: true
{{- end }}
{{- if and (eq $values.mode "distributed") $values.nats.tls.existingSecret (not $client) }}
- name: nats-tls
  mountPath: {{ include "cascade.natsTlsDir" .root }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "cascade.containerPorts" -}}
- name: admin
  containerPort: {{ .Values.ports.admin }}
  protocol: TCP
{{- end -}}

{{/* NATS's max_payload: the gateway's largest payload plus 1 MiB for the message around it. */}}
{{- define "cascade.natsMaxPayload" -}}
{{- $raw := .Values.config.ingest.max_payload -}}
{{- $text := toString $raw -}}
{{- /* A number in a values file is a float to Helm, which would print 8388608 as 8.388608e+06. */ -}}
{{- if or (kindIs "float64" $raw) (kindIs "int64" $raw) (kindIs "int" $raw) -}}
{{- $text = printf "%d" (int64 $raw) -}}
{{- end -}}
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
