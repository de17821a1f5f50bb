{{/* Names and labels. */}}
{{- define "recache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "recache.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "recache.headless" -}}
{{- printf "%s-pods" (include "recache.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "recache.routerName" -}}
{{- printf "%s-router" (include "recache.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "recache.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "recache.selectorLabels" -}}
app.kubernetes.io/name: {{ include "recache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "recache.labels" -}}
helm.sh/chart: {{ include "recache.chart" . }}
{{ include "recache.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "recache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "recache.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "recache.adminSecretName" -}}
{{- default (printf "%s-admin" (include "recache.fullname" .)) .Values.recache.adminToken.existingSecret -}}
{{- end -}}

{{/* Images. */}}
{{- define "recache.engineImage" -}}
{{- $e := .Values.engine -}}
{{- $repo := $e.image.repository | default (eq $e.kind "sglang" | ternary "lmsysorg/sglang" "vllm/vllm-openai") -}}
{{- $tag := $e.image.tag | default (eq $e.kind "sglang" | ternary "v0.5.23" "v0.32.0") -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{- define "recache.image" -}}
{{- printf "%s:%s" .Values.recache.image.repository (.Values.recache.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The engine's KV capacity as recache counts it: blocks (vLLM), tokens (SGLang). */}}
{{- define "recache.engineBlocks" -}}
{{- if eq .Values.engine.kind "sglang" -}}
{{- mul .Values.kvCache.blocks .Values.kvCache.blockSize -}}
{{- else -}}
{{- .Values.kvCache.blocks -}}
{{- end -}}
{{- end -}}

{{- define "recache.servedModelName" -}}
{{- .Values.engine.servedModelName | default .Values.engine.model -}}
{{- end -}}

{{- define "recache.shimFiles" -}}
{{- or .Values.shim.enabled (and .Values.itemPool.enabled (eq .Values.engine.kind "vllm")) -}}
{{- end -}}

{{/* The engine's command line (a YAML list). */}}
{{- define "recache.engineCommand" -}}
{{- $e := .Values.engine -}}
{{- $kv := .Values.kvCache -}}
{{- if eq $e.kind "sglang" -}}
{{- $events := dict "publisher" "zmq" "endpoint" (printf "tcp://%s:%d" (ternary "*" "127.0.0.1" .Values.router.enabled) (int $kv.eventsPort)) "bind" true -}}
- python3
- -m
- sglang.launch_server
- --model-path
- {{ $e.model | quote }}
- --served-model-name
- {{ include "recache.servedModelName" . | quote }}
- --host
- 0.0.0.0
- --port
- {{ $e.port | quote }}
- --max-total-tokens
- {{ include "recache.engineBlocks" . | quote }}
{{- if $e.maxModelLen }}
- --context-length
- {{ $e.maxModelLen | quote }}
{{- end }}
- --enable-cache-report
- --enable-metrics
{{- if .Values.recache.sglangPriority }}
- --radix-eviction-policy
- priority
{{- end }}
- --kv-events-config
- {{ toJson $events | quote }}
{{- else -}}
{{- $events := dict "enable_kv_cache_events" true "publisher" "zmq" "topic" "kv" "endpoint" (printf "tcp://*:%d" (int $kv.eventsPort)) "replay_endpoint" (printf "tcp://*:%d" (int $kv.replayPort)) -}}
- python3
- -m
- vllm.entrypoints.openai.api_server
- --model
- {{ $e.model | quote }}
- --served-model-name
- {{ include "recache.servedModelName" . | quote }}
- --host
- 0.0.0.0
- --port
- {{ $e.port | quote }}
- --enable-prefix-caching
- --block-size
- {{ $kv.blockSize | quote }}
- --num-gpu-blocks-override
- {{ $kv.blocks | quote }}
{{- if $e.maxModelLen }}
- --max-model-len
- {{ $e.maxModelLen | quote }}
{{- end }}
- --enable-prompt-tokens-details
- --kv-events-config
- {{ toJson $events | quote }}
{{- if .Values.itemPool.enabled }}
{{- $extra := dict "pool_bytes" (int64 .Values.itemPool.bytes) "pool_codec" (.Values.itemPool.codec | default "bf16") }}
{{- if .Values.itemPool.store.enabled }}
{{- $_ := set $extra "store" (include "recache.storeConfig" . | fromJson) }}
{{- end }}
{{- /* Blocks the connector cannot load (a store miss or timeout, a lost entry) are
recomputed; vLLM's default, "fail", would fail the request instead. */}}
{{- $pool := dict "kv_connector" "RecacheItemPoolConnector" "kv_connector_module_path" "recache_shim.item_pool" "kv_role" "kv_both" "kv_load_failure_policy" "recompute" "kv_connector_extra_config" $extra }}
- --kv-transfer-config
- {{ toJson $pool | quote }}
{{- end }}
{{- end }}
{{- range $e.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* recache's arguments beside the engine (a YAML list). */}}
{{- define "recache.sidecarArgs" -}}
{{- $r := .Values.recache -}}
{{- $kv := .Values.kvCache -}}
- serve
- --listen
- {{ printf "0.0.0.0:%d" (int $r.port) | quote }}
- --upstream
- {{ printf "http://127.0.0.1:%d" (int .Values.engine.port) | quote }}
- --engine
- {{ .Values.engine.kind | quote }}
- --kv-events
- {{ printf "tcp://127.0.0.1:%d" (int $kv.eventsPort) | quote }}
{{- if eq .Values.engine.kind "vllm" }}
- --kv-replay
- {{ printf "tcp://127.0.0.1:%d" (int $kv.replayPort) | quote }}
- --kv-block-size
- {{ $kv.blockSize | quote }}
{{- end }}
- --kv-engine-blocks
- {{ include "recache.engineBlocks" . | quote }}
{{- if .Values.shim.enabled }}
- --publish
- {{ printf "%s/eviction-order" .Values.shim.mountPath | quote }}
{{- end }}
{{- if and .Values.recache.sglangPriority (eq .Values.engine.kind "sglang") }}
- --sglang-priority
{{- end }}
- --eviction-policy
- {{ $r.evictionPolicy | quote }}
- --rank-selector
- {{ $r.rankSelector | quote }}
- --rank-admission
- {{ $r.rankAdmission | quote }}
{{- /* With a store the router owns every replica's pool: a second owner here would send
the engine evictions and labels the router does not know. */}}
{{- if and .Values.itemPool.enabled (eq .Values.engine.kind "vllm") (not .Values.itemPool.store.enabled) }}
{{ include "recache.itemPoolArgs" . }}
{{- end }}
{{ include "recache.commonArgs" . }}
{{- range $r.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* recache's item pool flags: the sidecar's, or with a store the router's. */}}
{{- define "recache.itemPoolArgs" -}}
- --rank-item-pool
- {{ .Values.itemPool.items | quote }}
- --rank-item-pool-fills
- {{ .Values.itemPool.fills | quote }}
- --rank-item-pool-refresh
- {{ .Values.itemPool.refresh | quote }}
- --rank-item-reuse
- pool
{{- end -}}

{{/* The item pool's store. */}}
{{- define "recache.storeName" -}}
{{- printf "%s-store" (include "recache.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Its address as recache --rank-pool-store takes it: redis://host:port or host:port. */}}
{{- define "recache.storeAddress" -}}
{{- $s := .Values.itemPool.store -}}
{{- if $s.valkey.enabled -}}
{{- printf "redis://%s.%s.svc:%d" (include "recache.storeName" .) .Release.Namespace (int $s.valkey.port) -}}
{{- else -}}
{{- $s.external -}}
{{- end -}}
{{- end -}}

{{- define "recache.storeIsMooncake" -}}
{{- not (hasPrefix "redis://" (include "recache.storeAddress" .)) -}}
{{- end -}}

{{/* The connector's store config (JSON): Redis's url, or Mooncake's master, metadata server
and this engine's own address (the pod IP, which Kubernetes substitutes for $(POD_IP) in the
command line: other replicas' clients reach the memory this engine lends the store there). */}}
{{- define "recache.storeConfig" -}}
{{- $s := .Values.itemPool.store -}}
{{- $addr := include "recache.storeAddress" . -}}
{{- $cfg := dict "timeout_ms" (int $s.timeoutMs) "put_timeout_ms" (int $s.putTimeoutMs) -}}
{{- if eq (include "recache.storeIsMooncake" .) "true" -}}
{{- $_ := set $cfg "master" $addr -}}
{{- $_ := set $cfg "metadata" ($s.metadata | default (printf "http://%s:8080/metadata" (regexReplaceAll ":[0-9]+$" $addr ""))) -}}
{{- $_ := set $cfg "local" "$(POD_IP)" -}}
{{- else -}}
{{- $_ := set $cfg "url" $addr -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}

{{/* Values the store cannot run with: refused at render time, saying why. */}}
{{- define "recache.storeChecks" -}}
{{- $s := .Values.itemPool.store -}}
{{- if $s.enabled -}}
{{- if not .Values.itemPool.enabled -}}
{{- fail "itemPool.store.enabled needs itemPool.enabled: the store is the item pool's cold tier" -}}
{{- end -}}
{{- if not .Values.router.enabled -}}
{{- fail "itemPool.store.enabled needs router.enabled: only the router fronts every replica, so only it can mark an item another replica's pool holds as cold (recache --rank-pool-store); each pod's recache knows its own pool alone" -}}
{{- end -}}
{{- if eq (empty $s.external) (not $s.valkey.enabled) -}}
{{- fail "itemPool.store.enabled needs exactly one store: itemPool.store.external (an address) or itemPool.store.valkey.enabled (the chart's Valkey)" -}}
{{- end -}}
{{- if $s.external -}}
{{- $ok := or (regexMatch "^redis://[A-Za-z0-9._-]+:[0-9]{1,5}(/[0-9]+)?$" $s.external) (regexMatch "^[A-Za-z0-9._-]+:[0-9]{1,5}$" $s.external) -}}
{{- $port := regexReplaceAll "^(redis://)?[^:]*:([0-9]+).*$" $s.external "${2}" | atoi -}}
{{- if or (not $ok) (lt $port 1) (gt $port 65535) -}}
{{- fail (printf "itemPool.store.external %q: give redis://host:port[/db] (Redis or Valkey) or host:port (a Mooncake Store master's RPC port)" $s.external) -}}
{{- end -}}
{{- end -}}
{{- if and $s.metadata (not (regexMatch "^https?://[^,[:space:]]+$" $s.metadata)) -}}
{{- fail (printf "itemPool.store.metadata %q: give the Mooncake metadata server's http:// URL" $s.metadata) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Flags the sidecar and the router share. */}}
{{- define "recache.commonArgs" -}}
{{- $r := .Values.recache -}}
- --worker-threads
- {{ $r.workerThreads | quote }}
- --drain-timeout
- {{ $r.drainTimeout | quote }}
- --upstream-timeout
- {{ $r.upstreamTimeout | quote }}
- --health-interval
- {{ $r.healthInterval | quote }}
{{- end -}}

{{/* recache's environment: log filter and the admin token. */}}
{{- define "recache.env" -}}
- name: RECACHE_LOG
  value: {{ .Values.recache.logLevel | quote }}
{{- if .Values.recache.adminToken.enabled }}
- name: RECACHE_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "recache.adminSecretName" . }}
      key: {{ .Values.recache.adminToken.secretKey }}
{{- end }}
{{- with .Values.recache.env }}
{{ toYaml . }}
{{- end }}
{{- end -}}
