#!/usr/bin/env bash
# manifests.sh HELM write|check
#
# manifests/ is rendered from the chart, charts/vmlane, its one source:
# `make manifests` (write) renders manifests/base/*.yaml and
# manifests/hybrid/routes-only.yaml with `helm template` (namespace
# vmlane-system, the namespace made, the image tagged latest for
# manifests/kustomization.yaml's images: to pick, the hybrid templates
# with hybrid.enabled) and copies the VMClaim CRD from the chart's crds/;
# `make lint` (check) renders them into a temporary folder and fails,
# with the diff, when manifests/ differs. The kustomizations (base's
# kustomization.yaml, the overlays) are written by hand: they patch what
# the chart renders.
set -euo pipefail

if [[ $# -ne 2 || ($2 != write && $2 != check) ]]; then
	echo "usage: $0 HELM write|check" >&2
	exit 2
fi
helm=$1 mode=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cd "$repo"
out=$(mktemp -d "${TMPDIR:-/tmp}/vmlane-manifests.XXXXXX")
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/base" "$out/hybrid"

header() {
	echo "# Rendered from charts/vmlane/$1 by \`make manifests\`: edit the chart, not this file."
}
# render TEMPLATE OUT [--set ...]: helm template of one template, without
# helm's "# Source:" lines and leading document separator.
render() {
	local t=$1 dst=$2
	shift 2
	local body
	body=$("$helm" template vmlane charts/vmlane --namespace vmlane-system \
		--set namespace.create=true --set image.tag=latest "$@" --show-only "templates/$t" |
		sed -e '/^# Source: /d' | sed -e '1{/^---$/d}' |
		awk '/^$/ { n++; next } { if ($0 != "---") for (i = 0; i < n; i++) print ""; n = 0; print }') || {
		echo "manifests.sh: helm template of templates/$t failed" >&2
		exit 1
	}
	# awk drops the blank lines Helm leaves before a document's end.
	{
		header "templates/$t"
		printf '%s\n' "$body"
	} >"$dst"
}
for t in namespace serviceaccount clusterrole clusterrolebinding vmclaims-policy daemonset; do
	render "$t.yaml" "$out/base/$t.yaml"
done
render routes-only.yaml "$out/hybrid/routes-only.yaml" --set hybrid.enabled=true
{
	header crds/vmclaims.yaml
	cat charts/vmlane/crds/vmclaims.yaml
} >"$out/base/vmclaims.yaml"

files=(base/namespace.yaml base/serviceaccount.yaml base/clusterrole.yaml base/clusterrolebinding.yaml
	base/vmclaims-policy.yaml base/daemonset.yaml base/vmclaims.yaml hybrid/routes-only.yaml)
if [[ $mode == write ]]; then
	for f in "${files[@]}"; do
		cp "$out/$f" "manifests/$f"
	done
	echo "manifests: ${#files[@]} files rendered from charts/vmlane"
	exit 0
fi
rc=0
for f in "${files[@]}"; do
	if ! diff -u "manifests/$f" "$out/$f" >"$out/diff" 2>&1; then
		echo "manifests/$f differs from what charts/vmlane renders (make manifests writes it):" >&2
		head -n 40 "$out/diff" >&2
		rc=1
	fi
done
exit $rc
