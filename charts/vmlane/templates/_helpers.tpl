{{/*
The labels every object of the chart carries. Only the name: the chart is
also the source of manifests/ (make manifests), where Helm's own labels
(managed-by, chart) would be untrue, and the DaemonSet's selector names
the same label, which can never change once the DaemonSet exists.
*/}}
{{- define "vmlane.labels" -}}
app.kubernetes.io/name: vmlane
{{- end }}

{{/*
The image: repository, then :tag (the chart's appVersion unless
image.tag is set), then @digest when image.digest is set.
*/}}
{{- define "vmlane.image" -}}
{{- .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/*
The arguments both modes share. A value left empty (null) passes no
flag, and vmlaned's own default holds: the chart keeps no copy of it.
*/}}
{{- define "vmlane.commonArgs" -}}
- --health-addr=127.0.0.1:{{ .Values.healthPort }}
- --metrics-addr=127.0.0.1:{{ .Values.metricsPort }}
{{- with .Values.serviceCIDRs }}
- --service-cidr={{ join "," . }}
{{- end }}
{{- with .Values.clusterCIDRs }}
- --cluster-cidr={{ join "," . }}
{{- end }}
{{- if ne .Values.crossSubnet.mode "off" }}
- --cross-subnet={{ .Values.crossSubnet.mode }}
{{- end }}
{{- if eq .Values.crossSubnet.mode "bgp" }}
{{- with .Values.crossSubnet.bgp.asn }}
- --bgp-asn={{ . }}
{{- end }}
{{- range .Values.crossSubnet.bgp.peers }}
- --bgp-peer={{ . }}
{{- end }}
{{- if not (kindIs "invalid" .Values.crossSubnet.bgp.maxPrefixes) }}
- --bgp-max-prefixes={{ .Values.crossSubnet.bgp.maxPrefixes }}
{{- end }}
{{- with .Values.crossSubnet.bgp.passwordSecret }}
- --bgp-password-file=/etc/vmlane/bgp/password
{{- end }}
{{- end }}
{{- if eq .Values.crossSubnet.mode "vxlan" }}
{{- with .Values.crossSubnet.vxlan.port }}
- --vxlan-port={{ . }}
{{- end }}
{{- with .Values.crossSubnet.vxlan.vni }}
- --vxlan-vni={{ . }}
{{- end }}
{{- end }}
{{- end }}
