# syntax=docker/dockerfile:1
#
# The vmlane image, used by manifests/ (ghcr.io/vmlane/vmlane): vmlaned, the
# DaemonSet's process; vmlane, the CNI plugin, which the install-cni init
# container copies onto the node; vmlanectl, for
# `kubectl -n vmlane-system exec ds/vmlane -- vmlanectl leases`.
#
#   docker build -t ghcr.io/vmlane/vmlane:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=v0.1.0 -t ghcr.io/vmlane/vmlane:v0.1.0 --push .
#
# BuildKit (the default builder since Docker 23) is needed for the cache
# mounts and COPY --chmod below.

# Go of go.mod's `go` line or newer.
ARG GO_VERSION=1.26

# Built on the build machine's platform and cross-compiled: no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
# CGO off, so all three are static: the plugin runs on the node itself,
# under whatever libc (if any) the node has, not in this image.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=$VERSION" \
        -o /out/ ./cmd/vmlane ./cmd/vmlaned ./cmd/vmlanectl
# The reference portmap plugin, at the version go.mod pins, which vmlane's
# conflists chain for hostPort: go install builds it as its own module's
# main (cross-compiled into bin/GOOS_GOARCH when not native).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    v=$(go list -m -f '{{.Version}}' github.com/containernetworking/plugins) \
    && CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
       go install -trimpath -ldflags "-s -w" github.com/containernetworking/plugins/plugins/meta/portmap@$v \
    && cp $(find /go/bin -name portmap -type f | head -n 1) /out/portmap

# Not distroless: vmlaned's iptables rules go through the iptables command
# (coreos/go-iptables execs it), and the init containers need a shell.
# Debian 12's iptables 1.8.9 has both backends, nft and legacy; iproute2 is
# for looking around (`ip route show proto 77`), vmlaned itself uses
# netlink.
FROM debian:12-slim
# The package list is manifests/image/packages, which `make image` (no
# Docker) installs with debootstrap: one list for both builds. Its
# comment lines are not packages.
COPY manifests/image/packages /tmp/packages
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(sed 's/#.*//' /tmp/packages) \
    && rm -rf /var/lib/apt/lists/* /tmp/packages

# The entrypoint points iptables and ip6tables at the backend whose rules
# the node already has, then execs its arguments; the script says why and
# how. `make image` packs the same file.
COPY --chmod=0755 manifests/image/entrypoint.sh /usr/local/bin/vmlane-entrypoint

COPY --from=build /out/ /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/vmlane-entrypoint"]
CMD ["vmlaned"]
