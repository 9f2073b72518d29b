{{/* The chart's name, or nameOverride (Helm's scaffold semantics). */}}
{{- define "telo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* fullnameOverride; else the release's name, prefixed with the chart's (or nameOverride)
     unless it already holds it. 50 characters at most: names get suffixes ("-gateway"). */}}
{{- define "telo.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "telo.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "telo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "telo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "telo.labels" -}}
{{ include "telo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "telo.serviceAccountName" -}}
{{- default (include "telo.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The gateway's Deployment, pods and ServiceAccount: an app name of their own, so neither the
     operator's Deployment nor its Services select them (and the NetworkPolicy lets in only them). */}}
{{- define "telo.gatewayName" -}}
{{- printf "%s-gateway" (include "telo.fullname" .) -}}
{{- end -}}

{{- define "telo.gatewaySelectorLabels" -}}
app.kubernetes.io/name: telo-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "telo.gatewayLabels" -}}
{{ include "telo.gatewaySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "telo.gatewayServiceAccountName" -}}
{{- default (include "telo.gatewayName" .) .Values.gateway.serviceAccount.name -}}
{{- end -}}

{{- define "telo.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Whether the rules are bound in one namespace (config.namespaces names exactly one) rather
     than cluster-wide: the operator lists cluster-wide as soon as it watches several. */}}
{{- define "telo.namespaced" -}}
{{- if eq (len (default list .Values.config.namespaces)) 1 }}true{{ end -}}
{{- end -}}

{{/* The operator's config file: the values, with the gateway's in-cluster URL by default. */}}
{{- define "telo.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- /* Builds run in the namespace the chart made for them unless config.build names another. */ -}}
{{- if and $config.build (not $config.build.namespace) -}}
{{- $_ := set $config.build "namespace" .Values.namespaces.builds -}}
{{- end -}}
{{- if and .Values.gateway.enabled (not $config.gatewayUrl) -}}
{{- $_ := set $config "gatewayUrl" (printf "%s://%s-gateway.%s.svc:%v" (ternary "https" "http" (not (empty .Values.gateway.tls.secretName))) (include "telo.fullname" .) .Release.Namespace .Values.service.gateway.port) -}}
{{- /* With a public Ingress host, the URL clients outside the cluster can reach. */ -}}
{{- if and .Values.gateway.ingress.enabled .Values.gateway.ingress.host -}}
{{- $_ := set $config "gatewayUrl" (printf "%s://%s" (ternary "https" "http" (not (empty .Values.gateway.ingress.tls.secretName))) .Values.gateway.ingress.host) -}}
{{- end -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The hardened container securityContext both containers share: values securityContext;
     with openshift: true without runAsUser and runAsGroup (restricted-v2 assigns them). */}}
{{- define "telo.containerSecurityContext" -}}
{{- $sc := deepCopy (default dict .Values.securityContext) -}}
{{- if .Values.openshift -}}
{{- $sc = omit $sc "runAsUser" "runAsGroup" -}}
{{- end -}}
{{- toYaml $sc -}}
{{- end -}}

{{/* The pods' securityContext: values podSecurityContext, likewise. */}}
{{- define "telo.podSecurityContext" -}}
{{- $sc := deepCopy (default dict .Values.podSecurityContext) -}}
{{- if .Values.openshift -}}
{{- $sc = omit $sc "runAsUser" "runAsGroup" "fsGroup" -}}
{{- end -}}
{{- toYaml $sc -}}
{{- end -}}

{{/* A pod template's labels: podLabels, then the selector labels (which win). */}}
{{- define "telo.podLabels" -}}
{{- toYaml (merge (fromYaml .selector) (deepCopy (default dict .root.Values.podLabels))) -}}
{{- end -}}
