{{/* Names */}}
{{- define "quotaplane.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "quotaplane.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "quotaplane.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "quotaplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include "quotaplane.selectorLabels" (list . "gateway") */}}
{{- define "quotaplane.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "quotaplane.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "quotaplane.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* KubeRay names the head's Service <cluster>-head-svc */}}
{{- define "quotaplane.rayAddress" -}}
{{ include "quotaplane.fullname" . }}-head-svc:{{ .Values.ray.gcsPort }}
{{- end -}}

{{- define "quotaplane.claimName" -}}
{{- .Values.persistence.existingClaim | default (printf "%s-data" (include "quotaplane.fullname" .)) -}}
{{- end -}}

{{/*
The flags of every `quotaplane up` in the release, as a JSON list: (list . rayAddress metricsPort). The same
shards, data dir, ports, placement (the custom resources raycluster.yaml gives the head and the workers, so no
`up` ever creates an actor elsewhere) and operator tokens everywhere; $(VAR) is expanded by the kubelet.
*/}}
{{- define "quotaplane.upFlags" -}}
{{- $ := index . 0 -}}
{{- $flags := list
  (printf "--ray-address=%s" (index . 1))
  "--data-dir=$(QUOTAPLANE_DATA_DIR)"
  "--shards=$(QUOTAPLANE_SHARDS)"
  "--host=0.0.0.0"
  (printf "--admin-port=%d" (int $.Values.ports.admin))
  (printf "--gateway-port=%d" (int $.Values.ports.gateway))
  (printf "--metrics-port=%d" (int (index . 2)))
  "--controller-resource=quotaplane_controller"
  "--shard-resource=quotaplane_shard"
  "--spread-shards" -}}
{{- if $.Values.operatorTokens.existingSecret }}
{{- $flags = append $flags "--operator-tokens-file=/etc/quotaplane/operator/operator-tokens" -}}
{{- end }}
{{- toJson $flags -}}
{{- end -}}

{{/*
The frontends' proxy-mode flags (frontend.proxy), as a JSON list (empty: proxy mode off). Upstream broker n is
served, and advertised to clients, on brokerPortBase + n; only the brokerNodeIds get a container and Service port,
so --upstream-max-brokers is the highest of them + 1 (a broker above it is logged by the proxy and left out of
what clients see, rather than advertised on a port nothing exposes). Fails the render, naming the value, on a
setting that cannot work: no upstream, no node ids, a broker port past 65535, one taken by another port of the
frontend, or (NodePort Service) outside the node-port range, since clients are told that very port.
*/}}
{{- define "quotaplane.proxyFlags" -}}
{{- $ := . -}}
{{- $p := $.Values.frontend.proxy -}}
{{- $flags := list -}}
{{- if $p.enabled }}
{{- $bootstrap := required "frontend.proxy.upstreamBootstrap is required with frontend.proxy.enabled: HOST:PORT[,HOST:PORT...] of the upstream Kafka cluster's brokers" $p.upstreamBootstrap -}}
{{- if not $p.brokerNodeIds }}
{{- fail "frontend.proxy.brokerNodeIds is required with frontend.proxy.enabled: the upstream's broker node ids, each served on frontend.proxy.brokerPortBase + id" -}}
{{- end }}
{{- $taken := dict (toString (int $.Values.ports.admin)) "ports.admin" (toString (int $.Values.ports.gateway)) "ports.gateway" (toString (int $.Values.ports.kafka)) "ports.kafka" (toString (int $.Values.frontend.advertisedPort)) "frontend.advertisedPort" -}}
{{- $maxBrokers := 0 -}}
{{- range $id := $p.brokerNodeIds }}
{{- $port := int (add $p.brokerPortBase $id) -}}
{{- if gt $port 65535 }}
{{- fail (printf "frontend.proxy: broker %d's port %d (brokerPortBase + id) is past 65535" (int $id) $port) -}}
{{- end }}
{{- with get $taken (toString $port) }}
{{- fail (printf "frontend.proxy: broker %d's port %d (brokerPortBase + id) is %s's" (int $id) $port .) -}}
{{- end }}
{{- if and (eq $.Values.frontend.service.type "NodePort") (or (lt $port 30000) (gt $port 32767)) }}
{{- fail (printf "frontend.proxy: broker %d's port %d (brokerPortBase + id) is outside 30000-32767: a NodePort Service exposes each broker on that very port (clients are told it), so set brokerPortBase in the node-port range" (int $id) $port) -}}
{{- end }}
{{- if ge (int $id) $maxBrokers }}
{{- $maxBrokers = add1 (int $id) -}}
{{- end }}
{{- end }}
{{- $flags = list (printf "--upstream-bootstrap=%s" $bootstrap) (printf "--upstream-broker-port-base=%d" (int $p.brokerPortBase)) (printf "--upstream-max-brokers=%d" (int $maxBrokers)) -}}
{{- if $p.failClosed }}
{{- $flags = append $flags "--upstream-fail-closed" -}}
{{- end }}
{{- if include "quotaplane.upstreamSasl" $ }}
{{- $flags = append $flags (printf "--upstream-sasl-username=%s" ($p.sasl.username | replace "$" "$$")) -}}
{{- $flags = append $flags "--upstream-sasl-password-file=/etc/quotaplane/upstream-sasl/password" -}}
{{- end }}
{{- end }}
{{- toJson $flags -}}
{{- end -}}

{{/*
SASL/PLAIN from the proxy to the upstream (frontend.proxy.sasl): "true" when on (proxy mode and a username), else
empty. The password stays in a Secret of the user's (values would put it in the release's history): its key is
mounted read-only as /etc/quotaplane/upstream-sasl/password. A username without that Secret fails the render.
The username's "$" is doubled above so the kubelet's $(VAR) expansion passes it through unchanged.
*/}}
{{- define "quotaplane.upstreamSasl" -}}
{{- $p := .Values.frontend.proxy -}}
{{- if and $p.enabled $p.sasl.username }}
{{- $_ := required "frontend.proxy.sasl.existingSecret is required with frontend.proxy.sasl.username: the name of a Secret holding that user's password (under frontend.proxy.sasl.passwordKey)" $p.sasl.existingSecret -}}
true
{{- end }}
{{- end -}}

{{- define "quotaplane.upstreamSaslMount" -}}
{{- if include "quotaplane.upstreamSasl" . }}
- {name: upstream-sasl, mountPath: /etc/quotaplane/upstream-sasl, readOnly: true}
{{- end }}
{{- end -}}

{{- define "quotaplane.upstreamSaslVolume" -}}
{{- if include "quotaplane.upstreamSasl" . }}
- name: upstream-sasl
  secret:
    secretName: {{ .Values.frontend.proxy.sasl.existingSecret | quote }}
    items: [{key: {{ .Values.frontend.proxy.sasl.passwordKey | default "password" | quote }}, path: password}]
{{- end }}
{{- end -}}

{{/* env, mounts and volume of the operator tokens (operatorTokens.existingSecret) */}}

{{- define "quotaplane.operatorTokenEnv" -}}
{{- if .Values.operatorTokens.existingSecret }}
- name: QUOTAPLANE_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ .Values.operatorTokens.existingSecret | quote }}, key: cli-token, optional: true}
{{- end }}
{{- end -}}

{{- define "quotaplane.operatorTokenMount" -}}
{{- if .Values.operatorTokens.existingSecret }}
- {name: operator-tokens, mountPath: /etc/quotaplane/operator, readOnly: true}
{{- end }}
{{- end -}}

{{- define "quotaplane.operatorTokenVolume" -}}
{{- if .Values.operatorTokens.existingSecret }}
- name: operator-tokens
  secret:
    secretName: {{ .Values.operatorTokens.existingSecret | quote }}
    items: [{key: operator-tokens, path: operator-tokens}]
{{- end }}
{{- end -}}

{{- define "quotaplane.saslSecret" -}}
{{- .Values.sasl.existingSecret | default (printf "%s-sasl" (include "quotaplane.fullname" .)) -}}
{{- end -}}

{{/* The data volume: the event log and the archives */}}
{{- define "quotaplane.dataVolume" -}}
- name: data
{{- if .Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "quotaplane.claimName" . }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{/*
A gateway or frontend pod: `quotaplane up --ray-address` beside a raylet (a Ray driver needs a raylet on its own
node; this one offers no CPUs), after the head's bootstrap `up` has created the detached actors, so this `up`
finds them by name. Its DATA_DIR is a pod-local emptyDir (`up` locks it); the actors keep their data on the Ray
pods' volume at the same path. Call with (list . "gateway" $values $extraArgs).
*/}}
{{- define "quotaplane.upPod" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $v := index . 2 -}}
{{- $extra := index . 3 -}}
metadata:
  labels:
    {{- include "quotaplane.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ $component }}
  annotations:
    checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") $ | sha256sum }}
spec:
  {{- with $.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $.Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: 30
  initContainers:
    - name: wait-for-bootstrap
      image: {{ include "quotaplane.image" $ }}
      imagePullPolicy: {{ $.Values.image.pullPolicy }}
      {{- if include "quotaplane.grpcTls" $ }}
      # the TLS health check of the probes, until it passes
      command: ["sh", "-c"]
      args:
        - until python -c "$0" "$1"; do echo "waiting for the controller and shards at $1"; sleep 3; done
        - {{ include "quotaplane.tlsHealthScript" $ | quote }}
        - "{{ include "quotaplane.fullname" $ }}-bootstrap:{{ $.Values.ports.admin }}"
      volumeMounts:
        - {name: grpc-tls, mountPath: /etc/quotaplane/grpc-tls, readOnly: true}
      {{- else }}
      command: ["python", "-c"]
      args:
        - |
          import sys, time, grpc
          from grpc_health.v1 import health_pb2, health_pb2_grpc
          target = "{{ include "quotaplane.fullname" $ }}-bootstrap:{{ $.Values.ports.admin }}"
          while True:
              try:
                  with grpc.insecure_channel(target) as ch:
                      r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=3)
                  if r.status == health_pb2.HealthCheckResponse.SERVING:
                      sys.exit(0)
              except grpc.RpcError:
                  pass
              print("waiting for the controller and shards at", target, flush=True)
              time.sleep(3)
      {{- end }}
      securityContext:
        {{- toYaml $.Values.securityContext | nindent 8 }}
      resources:
        requests: {cpu: 10m, memory: 64Mi}
        limits: {cpu: 200m, memory: 256Mi}
    - name: raylet
      image: {{ include "quotaplane.image" $ }}
      imagePullPolicy: {{ $.Values.image.pullPolicy }}
      # a native sidecar: started before `up`, stopped after it
      restartPolicy: Always
      command: ["sh", "-c"]
      args:
        - exec ray start --address="$QUOTAPLANE_RAY_ADDRESS" --num-cpus=0 --num-gpus=0 --object-store-memory=100000000 --block
      envFrom:
        - configMapRef:
            name: {{ include "quotaplane.fullname" $ }}
      securityContext:
        {{- toYaml $.Values.securityContext | nindent 8 }}
      volumeMounts:
        - {name: ray-tmp, mountPath: /tmp/ray}
      startupProbe:
        exec:
          command: ["sh", "-c", "test -S /tmp/ray/session_latest/sockets/raylet"]
        periodSeconds: 2
        failureThreshold: 60
      livenessProbe:
        exec:
          command: ["sh", "-c", "ray health-check --address \"$QUOTAPLANE_RAY_ADDRESS\""]
        periodSeconds: 30
        timeoutSeconds: 10
        failureThreshold: 3
      resources:
        {{- toYaml $.Values.raylet.resources | nindent 8 }}
  containers:
    - name: up
      image: {{ include "quotaplane.image" $ }}
      imagePullPolicy: {{ $.Values.image.pullPolicy }}
      args:
        - up
        # --metrics-port=-1: the fleet's metrics are served once, by the head's bootstrap (each scrape asks every shard)
        {{- range include "quotaplane.upFlags" (list $ "$(QUOTAPLANE_RAY_ADDRESS)" -1) | fromJsonArray }}
        - {{ . | quote }}
        {{- end }}
        {{- range include "quotaplane.grpcTlsFlags" (list $ false) | fromJsonArray }}
        - {{ . | quote }}
        {{- end }}
        {{- range $extra }}
        - {{ . | quote }}
        {{- end }}
      envFrom:
        - configMapRef:
            name: {{ include "quotaplane.fullname" $ }}
      {{- with include "quotaplane.operatorTokenEnv" $ }}
      env:
        {{- . | nindent 8 }}
      {{- end }}
      ports:
        - {name: admin, containerPort: {{ $.Values.ports.admin }}}
        - {name: gateway, containerPort: {{ $.Values.ports.gateway }}}
        {{- if eq $component "frontend" }}
        - {name: kafka, containerPort: {{ $.Values.ports.kafka }}}
        {{- if $.Values.frontend.proxy.enabled }}
        {{- range $.Values.frontend.proxy.brokerNodeIds }}
        - {name: {{ printf "broker-%d" (int .) }}, containerPort: {{ add $.Values.frontend.proxy.brokerPortBase . }}}
        {{- end }}
        {{- end }}
        {{- end }}
      securityContext:
        {{- toYaml $.Values.securityContext | nindent 8 }}
      volumeMounts:
        - {name: local-data, mountPath: {{ $.Values.dataDir }}}
        - {name: ray-tmp, mountPath: /tmp/ray}
        {{- include "quotaplane.operatorTokenMount" $ | nindent 8 }}
        {{- with include "quotaplane.grpcTlsMount" $ }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- if and (eq $component "frontend") $.Values.sasl.enabled }}
        - {name: sasl, mountPath: /etc/quotaplane/sasl, readOnly: true}
        {{- end }}
        {{- if eq $component "frontend" }}
        {{- with include "quotaplane.upstreamSaslMount" $ }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with include "quotaplane.frontendSecurityMounts" $ }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- end }}
      startupProbe:
        {{- include "quotaplane.grpcProbe" (list $ $.Values.ports.admin "") | nindent 8 }}
        periodSeconds: 3
        failureThreshold: 60
      livenessProbe:
        {{- include "quotaplane.grpcProbe" (list $ $.Values.ports.admin "") | nindent 8 }}
        periodSeconds: 15
        timeoutSeconds: 5
        failureThreshold: 4
      readinessProbe:
        {{- include "quotaplane.grpcProbe" (list $ $.Values.ports.gateway "quotaplane.v1.QuotaService") | nindent 8 }}
        periodSeconds: 5
        timeoutSeconds: 3
      resources:
        {{- toYaml $v.resources | nindent 8 }}
  volumes:
    - {name: local-data, emptyDir: {}}
    - {name: ray-tmp, emptyDir: {}}
    {{- include "quotaplane.operatorTokenVolume" $ | nindent 4 }}
    {{- with include "quotaplane.grpcTlsVolume" $ }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- if and (eq $component "frontend") $.Values.sasl.enabled }}
    - name: sasl
      secret:
        secretName: {{ include "quotaplane.saslSecret" $ }}
    {{- end }}
    {{- if eq $component "frontend" }}
    {{- with include "quotaplane.upstreamSaslVolume" $ }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with include "quotaplane.frontendSecurityVolumes" $ }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  affinity:
    {{- if $v.affinity }}
    {{- toYaml $v.affinity | nindent 4 }}
    {{- else }}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels:
                {{- include "quotaplane.selectorLabels" (list $ $component) | nindent 18 }}
    {{- end }}
{{- end -}}

{{/*
TLS on the gRPC listeners of every `up` (grpcTls), from a Secret of the user's (tls.crt, tls.key, ca.crt; never
values) mounted read-only at /etc/quotaplane/grpc-tls. "true" when on, else empty; grpcTls.serverName is required
then: the name in the certificate that the frontends, the probes and the wait for the bootstrap check (they dial
127.0.0.1 or the bootstrap Service, names a certificate need not hold).
*/}}
{{- define "quotaplane.grpcTls" -}}
{{- if .Values.grpcTls.existingSecret }}
{{- $_ := required "grpcTls.serverName is required with grpcTls.existingSecret: the name the listeners' certificate holds, which the frontends and the probes check" .Values.grpcTls.serverName -}}
true
{{- end }}
{{- end -}}

{{/*
The gRPC listeners' TLS flags, as a JSON list (empty: off): (list . shell). The AdminService's
ssl.principal.mapping.rules come from the ConfigMap's QUOTAPLANE_ADMIN_SSL_PRINCIPAL_MAPPING_RULES, so a rule's
"$1" is passed as written: the kubelet inserts a $(VAR)'s value verbatim, and a shell ("shell": the bootstrap's
sh -c) expands a quoted "$VAR" once.
*/}}
{{- define "quotaplane.grpcTlsFlags" -}}
{{- $ := index . 0 -}}
{{- $t := $.Values.grpcTls -}}
{{- $flags := list -}}
{{- if include "quotaplane.grpcTls" $ }}
{{- $flags = list "--tls-cert=/etc/quotaplane/grpc-tls/tls.crt" "--tls-key=/etc/quotaplane/grpc-tls/tls.key" -}}
{{- if $t.mutual }}
{{- $flags = append $flags "--tls-client-ca=/etc/quotaplane/grpc-tls/ca.crt" -}}
{{- end }}
{{- if $t.adminSslPrincipalMappingRules }}
{{- if not $t.mutual }}
{{- fail "grpcTls.adminSslPrincipalMappingRules maps client certificates: it needs grpcTls.mutual" -}}
{{- end }}
{{- if index . 1 }}
{{- $flags = append $flags "\"--admin-ssl-principal-mapping-rules=$QUOTAPLANE_ADMIN_SSL_PRINCIPAL_MAPPING_RULES\"" -}}
{{- else }}
{{- $flags = append $flags "--admin-ssl-principal-mapping-rules=$(QUOTAPLANE_ADMIN_SSL_PRINCIPAL_MAPPING_RULES)" -}}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $flags -}}
{{- end -}}

{{- define "quotaplane.grpcTlsMount" -}}
{{- if include "quotaplane.grpcTls" . }}
- {name: grpc-tls, mountPath: /etc/quotaplane/grpc-tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "quotaplane.grpcTlsVolume" -}}
{{- if include "quotaplane.grpcTls" . }}
- name: grpc-tls
  secret:
    secretName: {{ .Values.grpcTls.existingSecret | quote }}
    items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}, {key: ca.crt, path: ca.crt}]
{{- end }}
{{- end -}}

{{/*
A probe's handler for a gRPC listener's health: (list . port service). The kubelet's gRPC probe speaks no TLS, so
with grpcTls it is an exec of the image's Python asking grpc.health.v1 over TLS (trusting ca.crt, presenting the
pod's certificate under mutual TLS, checking grpcTls.serverName): SERVING or the probe fails.
*/}}
{{- define "quotaplane.grpcProbe" -}}
{{- $ := index . 0 -}}
{{- $port := index . 1 -}}
{{- $service := index . 2 -}}
{{- if include "quotaplane.grpcTls" $ -}}
exec:
  command:
    - python
    - -c
    - {{ include "quotaplane.tlsHealthScript" $ | quote }}
    - {{ printf "127.0.0.1:%d" (int $port) | quote }}
    - {{ $service | quote }}
{{- else -}}
grpc:
  port: {{ $port }}
{{- if $service }}
  service: {{ $service }}
{{- end }}
{{- end }}
{{- end -}}

{{/* grpc.health.v1 Check over TLS: argv target [service]; exit 0 when SERVING (the probes, the bootstrap wait) */}}
{{- define "quotaplane.tlsHealthScript" -}}
import sys, grpc
from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g
read = lambda name: open("/etc/quotaplane/grpc-tls/" + name, "rb").read()
mutual = {{ if .Values.grpcTls.mutual }}True{{ else }}False{{ end }}
creds = grpc.ssl_channel_credentials(read("ca.crt"), read("tls.key") if mutual else None, read("tls.crt") if mutual else None)
with grpc.secure_channel(sys.argv[1], creds, options=[("grpc.ssl_target_name_override", {{ .Values.grpcTls.serverName | toJson }})]) as channel:
    status = g.HealthStub(channel).Check(h.HealthCheckRequest(service=sys.argv[2] if len(sys.argv) > 2 else ""), timeout=3).status
sys.exit(0 if status == h.HealthCheckResponse.SERVING else 1)
{{- end -}}

{{/*
The frontends' flags for the Kafka listener's TLS (kafkaTls), SCRAM (sasl.scram), and their own TLS client of the gRPC listeners (grpcTls), as a JSON list. Every secret is a mounted file of a Secret of the
user's; the Kafka listener's ssl.principal.mapping.rules come from the ConfigMap as the admin's do.
*/}}
{{- define "quotaplane.frontendSecurityFlags" -}}
{{- $ := . -}}
{{- $k := $.Values.kafkaTls -}}
{{- $flags := list -}}
{{- if $k.existingSecret }}
{{- $flags = concat $flags (list "--kafka-tls-cert=/etc/quotaplane/kafka-tls/tls.crt" "--kafka-tls-key=/etc/quotaplane/kafka-tls/tls.key") -}}
{{- if $k.clientAuth }}
{{- $flags = append $flags "--kafka-tls-client-ca=/etc/quotaplane/kafka-tls/ca.crt" -}}
{{- end }}
{{- end }}
{{- if $k.sslPrincipalMappingRules }}
{{- if not (and $k.existingSecret $k.clientAuth) }}
{{- fail "kafkaTls.sslPrincipalMappingRules maps client certificates: it needs kafkaTls.existingSecret and kafkaTls.clientAuth" -}}
{{- end }}
{{- $flags = append $flags "--kafka-ssl-principal-mapping-rules=$(QUOTAPLANE_KAFKA_SSL_PRINCIPAL_MAPPING_RULES)" -}}
{{- end }}
{{- if $.Values.sasl.scram.existingSecret }}
{{- $flags = append $flags "--sasl-scram-credentials-file=/etc/quotaplane/sasl-scram/scram-credentials" -}}
{{- end }}
{{- if include "quotaplane.grpcTls" $ }}
{{- $flags = concat $flags (list "--frontend-tls-ca=/etc/quotaplane/grpc-tls/ca.crt" (printf "--frontend-tls-server-name=%s" $.Values.grpcTls.serverName)) -}}
{{- if $.Values.grpcTls.frontendClientSecret }}
{{- $flags = concat $flags (list "--frontend-tls-cert=/etc/quotaplane/grpc-client/tls.crt" "--frontend-tls-key=/etc/quotaplane/grpc-client/tls.key") -}}
{{- end }}
{{- end }}
{{- toJson $flags -}}
{{- end -}}

{{/* "true" when the Kafka listener authenticates its clients (SASL/PLAIN, SCRAM, or client certificates) */}}
{{- define "quotaplane.kafkaAuthenticates" -}}
{{- if or .Values.sasl.enabled .Values.sasl.scram.existingSecret (and .Values.kafkaTls.existingSecret .Values.kafkaTls.clientAuth) }}true{{ end }}
{{- end -}}

{{- define "quotaplane.frontendSecurityMounts" -}}
{{- if .Values.kafkaTls.existingSecret }}
- {name: kafka-tls, mountPath: /etc/quotaplane/kafka-tls, readOnly: true}
{{- end }}
{{- if .Values.sasl.scram.existingSecret }}
- {name: sasl-scram, mountPath: /etc/quotaplane/sasl-scram, readOnly: true}
{{- end }}
{{- if and (include "quotaplane.grpcTls" .) .Values.grpcTls.frontendClientSecret }}
- {name: grpc-client, mountPath: /etc/quotaplane/grpc-client, readOnly: true}
{{- end }}
{{- end -}}

{{- define "quotaplane.frontendSecurityVolumes" -}}
{{- if .Values.kafkaTls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafkaTls.existingSecret | quote }}
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
      {{- if .Values.kafkaTls.clientAuth }}
      - {key: ca.crt, path: ca.crt}
      {{- end }}
{{- end }}
{{- if .Values.sasl.scram.existingSecret }}
- name: sasl-scram
  secret:
    secretName: {{ .Values.sasl.scram.existingSecret | quote }}
    items: [{key: scram-credentials, path: scram-credentials}]
{{- end }}
{{- if and (include "quotaplane.grpcTls" .) .Values.grpcTls.frontendClientSecret }}
- name: grpc-client
  secret:
    secretName: {{ .Values.grpcTls.frontendClientSecret | quote }}
    items: [{key: tls.crt, path: tls.crt}, {key: tls.key, path: tls.key}]
{{- end }}
{{- end -}}
