#!/usr/bin/env bash
# release.sh VERSION DIST_DIR IMAGE_DIR KUBECTL HELM
#
# Writes a vmlane release into DIST_DIR (made new), from the images `make
# image` packed into IMAGE_DIR with binaries stamped VERSION (`make
# release VERSION=vX.Y.Z` runs the builds first, then this):
#
#   oci/                          the OCI image layout: one image index,
#                                 linux/amd64 and linux/arm64, named
#                                 VERSION (ghcr.io/vmlane/vmlane:VERSION)
#   vmlane-image-VERSION-linux-ARCH.tar  each image as a tarball tagged
#                                 ghcr.io/vmlane/vmlane:VERSION, for
#                                 `ctr -n k8s.io images import`
#   vmlane.yaml                   manifests/ in one file (kubectl kustomize),
#                                 the image pinned as
#                                 ghcr.io/vmlane/vmlane:VERSION@sha256:INDEX
#   vmlane-X.Y.Z.tgz              the Helm chart (charts/vmlane), version and
#                                 appVersion the release's, its image
#                                 pinned by the index's digest
#   vmlane-VERSION-darwin-ARCH.tar.gz  vmlaned, vmlanectl, vmlane-vmnet, the launchd plists
#                                 and install.sh, for arm64 and amd64 Macs
#   RELEASE-NOTES.md              CHANGELOG.md's section for VERSION
#   SHA256SUMS                    of every file above
#
# Every file is reproducible: the same commit and VERSION give the same
# bytes (the archives are dated at the commit's time). Nothing is
# published: .github/workflows/release.yml does that from DIST_DIR.
set -euo pipefail

if [[ $# -ne 5 ]]; then
	echo "usage: $0 VERSION DIST_DIR IMAGE_DIR KUBECTL HELM" >&2
	exit 2
fi
version=$1 dist=$2 images=$3 kubectl=$4 helm=$5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
log() { echo "release: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
image=ghcr.io/vmlane/vmlane
start=$SECONDS

cd "$repo"
work=$(mktemp -d "${TMPDIR:-/tmp}/vmlane-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "building the release tools"
CGO_ENABLED=0 go build -trimpath -o "$work/release" ./internal/tools/release || die "building internal/tools/release"
CGO_ENABLED=0 go build -trimpath -o "$work/imagebuild" ./internal/tools/imagebuild || die "building imagebuild"
tool=$work/release

# First what can refuse the release: the version and its notes, and the
# images.
"$tool" notes -version "$version" -changelog CHANGELOG.md >"$work/notes" || die "no release notes for $version"
for f in vmlane.tar vmlane-arm64.tar; do
	[[ -f $images/$f ]] || die "$images/$f is missing: make image builds it"
done
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
# dist/ is made new: never a folder that holds anything else of value.
case $dist in
/ | "$repo" | "$HOME" | "$repo"/.cache* | "$repo"/bin*) die "DIST_DIR $dist would be emptied: give a folder of its own (make release uses dist/)" ;;
esac
find "$dist" -mindepth 1 -delete
mv "$work/notes" "$dist/RELEASE-NOTES.md"

log "image index and per-arch tarballs"
digest=$("$work/imagebuild" index -tag "$image:$version" -oci "$dist/oci" -tar "$dist/vmlane-image-$version" \
	"$images/vmlane.tar" "$images/vmlane-arm64.tar") || die "imagebuild index"
[[ $digest == sha256:* ]] || die "imagebuild index printed $digest, not a digest"

log "vmlane.yaml (kubectl kustomize manifests/, the image pinned by digest)"
"$kubectl" kustomize manifests/ >"$work/vmlane.yaml" || die "kubectl kustomize manifests/"
refs=$(grep -c "image: $image:latest\$" "$work/vmlane.yaml" || true)
others=$(grep -E "^ *image:" "$work/vmlane.yaml" | grep -vc "image: $image:latest\$" || true)
[[ $refs -gt 0 && $others -eq 0 ]] ||
	die "manifests/ name the image $refs times as $image:latest and $others times otherwise: want only the former"
sed "s|image: $image:latest\$|image: $image:$version@$digest|" "$work/vmlane.yaml" >"$dist/vmlane.yaml"

# Every archive's entries are dated at the release commit's time.
mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)

log "the Helm chart"
cp -r charts/vmlane "$work/chart"
# The packaged chart's default image is the release's, by digest.
sed -i "s|^  digest: \"\"\$|  digest: \"$digest\"|" "$work/chart/values.yaml"
grep -q "^  digest: \"$digest\"\$" "$work/chart/values.yaml" || die "could not pin the chart's image digest in values.yaml"
"$helm" lint --strict "$work/chart" >/dev/null || die "helm lint of the release's chart"
"$helm" package "$work/chart" --version "${version#v}" --app-version "$version" -d "$work" >/dev/null || die "helm package"
# helm package dates each entry with the clock: dated at the commit's time
# instead, the chart is the same bytes on every run.
"$tool" normalize-tgz -in "$work/vmlane-${version#v}.tgz" -mtime "$mtime" -out "$dist/vmlane-${version#v}.tgz" ||
	die "normalizing the chart's archive"

for arch in arm64 amd64; do
	log "macOS $arch archive"
	out=$work/darwin-$arch
	CGO_ENABLED=0 GOOS=darwin GOARCH=$arch go build -trimpath \
		-ldflags "-s -w -X github.com/vmlane/vmlane/internal/version.Version=$version" \
		-o "$out/" ./cmd/vmlaned ./cmd/vmlanectl ./cmd/vmlane-vmnet || die "building vmlaned, vmlanectl and vmlane-vmnet for darwin/$arch"
	"$tool" darwin-archive -version "$version" -arch "$arch" -bin "$out" -darwin manifests/darwin -mtime "$mtime" \
		-out "$dist/vmlane-$version-darwin-$arch.tar.gz" || die "packing the darwin/$arch archive"
done

"$tool" sums "$dist" || die "writing SHA256SUMS"
log "$dist in $((SECONDS - start))s; the image index is $image:$version@$digest"
(cd "$dist" && for f in *.tar *.tar.gz *.tgz vmlane.yaml; do printf '  %-44s %6s\n' "$f" "$(du -h "$f" | cut -f1)"; done) >&2
