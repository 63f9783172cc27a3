# vmlane's build. `make test` and `make bench` work on a fresh Debian 12
# machine as root: they install what they need first (apt packages, a test
# guest kernel and initramfs, reference CNI plugins), caching what is slow to
# build under .cache/, keyed by version, so a second run is fast.

SHELL     := /bin/bash
GO        ?= go
BIN       := $(CURDIR)/bin
CACHE     := $(CURDIR)/.cache
FUZZTIME  ?= 10s
# Packages the privileged tests and the demo use, all from Debian 12.
APT_PKGS  := iproute2 iptables iputils-ping util-linux procps kmod cpio busybox-static qemu-system-x86 isc-dhcp-client dhcpcd-base dnsmasq-base \
	runc debootstrap mmdebstrap binutils bird2 iperf3

export GOFLAGS ?= -buildvcs=false

# The release every binary is stamped with (internal/version): `make
# release VERSION=vX.Y.Z`, else what git says of the checkout (the tag, or
# the tag and the commits since, or the commit; -dirty with local changes).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# -trimpath (below): the binaries do not carry the checkout's path, so the
# same tree gives the same binaries (and image digests) wherever it is
# built. -s -w: no symbol table or DWARF (a third of vmlaned's size; panics
# still name their functions and lines).
GO_LDFLAGS = -s -w -X github.com/vmlane/vmlane/internal/version.Version=$(VERSION)

# actionlint checks the GitHub workflows (runner labels, expressions,
# action inputs); built from the module proxy at this version.
ACTIONLINT_VERSION = v1.7.12

# The reference CNI plugins `make bench` holds vmlane against: bridge and
# host-local at the containernetworking/plugins version go.mod pins.
CNI_PLUGINS_VERSION = $(shell $(GO) list -m -f '{{.Version}}' github.com/containernetworking/plugins)
CNI_PLUGINS_DIR     = $(CACHE)/cni-plugins/$(CNI_PLUGINS_VERSION)

.PHONY: all build build-arm64 qemu-user helm manifests previous release test deps bench-deps lint unit e2e e2e-real e2e-hybrid e2e-cross fuzz darwin bench demo demo-hybrid demo-down guest udhcpc6 controlplane realnode flannel coredns conformance-tools conformance image cni-reference clean distclean

all: build

# install-portmap DIR,GOARCH: the reference portmap plugin, at the CNI
# plugins version go.mod pins, for linux/GOARCH, into DIR, unless DIR has
# that version. go install puts it in GOPATH/bin, or GOPATH/bin/linux_ARCH
# when cross-built (it refuses a GOBIN then), whence it is copied.
GO_HOST_ARCH = $(shell $(GO) env GOARCH)
define install-portmap
test -x $(1)/portmap -a "$$(cat $(1)/.portmap-version 2>/dev/null)" = "$(CNI_PLUGINS_VERSION)" || { \
	CGO_ENABLED=0 GOARCH=$(2) GOBIN= $(GO) install github.com/containernetworking/plugins/plugins/meta/portmap@$(CNI_PLUGINS_VERSION) && \
	gopath=$$($(GO) env GOPATH) && \
	cp "$$( [ $(2) = $(GO_HOST_ARCH) ] && echo $$gopath/bin || echo $$gopath/bin/linux_$(2) )/portmap" $(1)/portmap && \
	echo $(CNI_PLUGINS_VERSION) > $(1)/.portmap-version; }
endef

## build: vmlane, vmlaned and vmlanectl into bin/, static (the plugin runs
## on the node under whatever libc it has; the image packs these), and the
## reference portmap plugin, which vmlane's conflists chain for hostPort
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(GO_LDFLAGS)' -o $(BIN)/ ./cmd/...
	@$(call install-portmap,$(BIN),$(GO_HOST_ARCH))

## build-arm64: the same binaries for linux/arm64 into bin/linux-arm64/,
## for the arm64 image
build-arm64:
	@mkdir -p $(BIN)/linux-arm64
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -trimpath -ldflags '$(GO_LDFLAGS)' -o $(BIN)/linux-arm64/ ./cmd/...
	@$(call install-portmap,$(BIN)/linux-arm64,arm64)

## helm: the helm command built from the module proxy, cached (the
## chart's checks, make manifests)
helm:
	@bash internal/tools/helm/build.sh $(CACHE)/helm >/dev/null

## manifests: manifests/base and manifests/hybrid/routes-only.yaml rendered
## from the chart, charts/vmlane (make lint checks they match)
manifests: helm
	@bash internal/tools/helm/manifests.sh $$(bash internal/tools/helm/build.sh --print-dir $(CACHE)/helm) write

# The version the real-node suite rolls back to and forward from
# (TestRollBackAndForward): the last commit before releases existed; once
# one does, its tag.
PREVIOUS = c120fc963889b227aaf78c327dd5117181d2761f

## previous: the image of the PREVIOUS version, built from this clone's
## history with that version's own build, cached by commit
previous: build
	@bash internal/testing/previous/build.sh $(CACHE)/previous $(PREVIOUS) $(BIN) >/dev/null

## qemu-user: Debian's qemu-aarch64-static, unpacked from its package, not
## installed (no binfmt registration), for the arm64 image's checks
qemu-user:
	@bash internal/testing/qemuuser/build.sh $(CACHE)/qemu-user >/dev/null

## deps: Debian packages the tests need (only what is missing)
deps:
	@missing=""; for p in $(APT_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "missing packages:$$missing (run as root to install them)"; exit 1; fi; \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

## bench-deps: the Debian packages only `make bench` uses: ISC Kea, the
## second DHCP server dhcpbench holds vmlaned against
bench-deps:
	@$(MAKE) --no-print-directory deps APT_PKGS="kea-dhcp4-server kea-dhcp6-server"

## guest: the QEMU test guest (Debian kernel + busybox initramfs), cached
guest: deps
	@bash internal/testing/testvm/build-guest.sh $(CACHE)/guest

## udhcpc6: a static busybox with udhcpc6 (Debian's has none) from Debian's busybox source package, cached
udhcpc6:
	@bash internal/testing/testvm/build-udhcpc6.sh $(CACHE)/udhcpc6 >/dev/null

## controlplane: kube-apiserver and etcd built from the module proxy, cached
controlplane:
	@bash internal/testing/controlplane/build.sh $(CACHE)/controlplane

## realnode: containerd 2.x (module proxy) and Debian's containerd 1.6 for the real nodes, cached
realnode: deps
	@bash internal/testing/realnode/build.sh $(CACHE)/realnode

## flannel: flanneld built from the module proxy, for the hybrid suite, cached
flannel:
	@bash internal/testing/realnode/build-flannel.sh $(CACHE)/flannel >/dev/null

## coredns: CoreDNS built from the module proxy and packed as an image, the cluster DNS of the real-node clusters and the demo, cached
coredns:
	@bash internal/testing/realnode/build-coredns.sh $(CACHE)/coredns >/dev/null

## conformance-tools: Kubernetes' e2e.test and agnhost built from the module proxy, and the test images the network tests run, cached
conformance-tools: deps controlplane
	@bash internal/testing/conformance/build.sh $(CACHE)/conformance $$(bash internal/testing/controlplane/build.sh --print-dir $(CACHE)/controlplane) >/dev/null

## conformance: Kubernetes' [sig-network] conformance tests and Networking Granular Checks against the real-node cluster (the one make demo builds), with their counts and each failure
conformance: deps guest controlplane realnode coredns image cni-reference build conformance-tools
	@start=$$(date +%s); \
	$(TEST_ENV) VMLANE_CONFORMANCE=full $(GO) test -tags e2e -count=1 -timeout 120m -v -run '^TestUpstreamConformance$$' ./e2e/realnode/ 2>&1 | tee /tmp/vmlane-conformance-run.log | grep -E '^(conformance:|  FAILED|          |  skipped|  left out|--- |PASS|FAIL|ok)' ; \
	rc=$${PIPESTATUS[0]}; echo "make conformance: $$(( $$(date +%s) - start ))s in all (logs: /tmp/vmlane-conformance-run.log, /tmp/vmlane-conformance.log)"; exit $$rc

## image: the vmlane image (linux/amd64 and linux/arm64), the pause and busybox test images, as tarballs in .cache/images (no Docker)
image: deps build build-arm64
	@bash internal/tools/imagebuild/build.sh $(CACHE)/images $(BIN)

## release: VERSION=vX.Y.Z: dist/ with the multi-arch image (OCI layout and
## per-arch tarballs), vmlane.yaml pinned by digest, the macOS archives,
## the release notes and SHA256SUMS (internal/tools/release/release.sh);
## publishing is .github/workflows/release.yml's
release:
	@# Before any build: VERSION must be a release (internal/version's
	@# IsRelease) with its section in CHANGELOG.md.
	@$(GO) run ./internal/tools/release notes -version '$(VERSION)' -changelog CHANGELOG.md >/dev/null || { \
		echo "make release: give VERSION=vMAJOR.MINOR.PATCH with its CHANGELOG.md section (e.g. make release VERSION=v0.4.0)"; exit 2; }
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory deps controlplane helm build build-arm64 image VERSION=$(VERSION) && \
	$(BIN)/vmlaned --version 2>&1 | grep -q "^vmlaned $(VERSION) " || { echo "make release: bin/vmlaned is not stamped $(VERSION)"; exit 1; }; \
	bash internal/tools/release/release.sh $(VERSION) $(CURDIR)/dist $(CACHE)/images \
		$$(bash internal/testing/controlplane/build.sh --print-dir $(CACHE)/controlplane)/kubectl \
		$$(bash internal/tools/helm/build.sh --print-dir $(CACHE)/helm) && \
	echo "make release: $$(( $$(date +%s) - start ))s in all"

## test: everything CI runs: lint, unit + privileged tests, e2e, fuzz, darwin build
test: deps udhcpc6 guest controlplane realnode flannel coredns conformance-tools qemu-user helm previous image cni-reference build lint unit e2e fuzz darwin
	@echo "make test: all passed"

# The environment the demo finds its inputs by: what it builds its
# cluster of, and nothing it does not use (each $$(... --print-dir) builds
# what is missing).
DEMO_ENV = VMLANE_PRIVILEGED=require VMLANE_BIN_DIR=$(BIN) \
	VMLANE_GUEST_DIR=$$(bash internal/testing/testvm/build-guest.sh --print-dir $(CACHE)/guest) \
	VMLANE_CONTROLPLANE_DIR=$$(bash internal/testing/controlplane/build.sh --print-dir $(CACHE)/controlplane) \
	VMLANE_REALNODE_DIR=$$(bash internal/testing/realnode/build.sh --print-dir $(CACHE)/realnode) \
	VMLANE_IMAGE_DIR=$(CACHE)/images VMLANE_CNI_PLUGINS_DIR=$(CNI_PLUGINS_DIR)
# The environment every privileged test finds its inputs by.
TEST_ENV = $(DEMO_ENV) \
	VMLANE_UDHCPC6=$$(bash internal/testing/testvm/build-udhcpc6.sh --print-dir $(CACHE)/udhcpc6) \
	VMLANE_FLANNEL_DIR=$$(bash internal/testing/realnode/build-flannel.sh --print-dir $(CACHE)/flannel) \
	VMLANE_COREDNS_DIR=$$(bash internal/testing/realnode/build-coredns.sh --print-dir $(CACHE)/coredns) \
	VMLANE_CONFORMANCE_DIR=$$(bash internal/testing/conformance/build.sh --print-dir $(CACHE)/conformance $$(bash internal/testing/controlplane/build.sh --print-dir $(CACHE)/controlplane)) \
	VMLANE_QEMU_AARCH64=$$(bash internal/testing/qemuuser/build.sh --print-dir $(CACHE)/qemu-user) \
	VMLANE_HELM=$$(bash internal/tools/helm/build.sh --print-dir $(CACHE)/helm) \
	VMLANE_PREVIOUS_IMAGE=$$(bash internal/testing/previous/build.sh --print-dir $(CACHE)/previous $(PREVIOUS) $(BIN))

## demo: a three-node cluster of real nodes, vmlane's DaemonSet, VM and plain pods made with kubectl, its account printed, torn down (KEEP=1 leaves it up)
demo: deps guest controlplane realnode coredns image cni-reference build
	@$(GO) build -o $(BIN)/vmlane-demo ./e2e/demo
	@$(DEMO_ENV) $(BIN)/vmlane-demo -bin $(BIN) -overlay e2e/overlay -images $(CACHE)/images -cni-bin $(CNI_PLUGINS_DIR) -state $(CACHE)/demo \
		-coredns $$(bash internal/testing/realnode/build-coredns.sh --print-dir $(CACHE)/coredns) $(if $(KEEP),-keep)

## demo-hybrid: the hybrid cluster (flannel on two nodes with vmlane's routes-only DaemonSet, two VM nodes, one without kube-proxy), its routes and ping matrix, torn down (KEEP=1 leaves it up)
demo-hybrid: deps guest controlplane realnode flannel image cni-reference build
	@$(GO) build -o $(BIN)/vmlane-demo ./e2e/demo
	@$(DEMO_ENV) $(BIN)/vmlane-demo -hybrid -flannel $$(bash internal/testing/realnode/build-flannel.sh --print-dir $(CACHE)/flannel) \
		-bin $(BIN) -overlay e2e/overlay-hybrid -images $(CACHE)/images -cni-bin $(CNI_PLUGINS_DIR) -state $(CACHE)/demo $(if $(KEEP),-keep)

## demo-down: tear down the cluster `make demo KEEP=1` or `make demo-hybrid KEEP=1` left running
demo-down:
	@pid=$$(cat $(CACHE)/demo/demo.pid 2>/dev/null) && kill -TERM $$pid 2>/dev/null || { echo "no demo running"; exit 0; }; \
	for i in $$(seq 100); do kill -0 $$pid 2>/dev/null || break; sleep 0.2; done; \
	rm -f $(CACHE)/demo/demo.pid; echo "demo torn down"

## e2e: the multi-node end-to-end suites (namespaces; real nodes; hybrid), with their total time
e2e: deps guest controlplane realnode flannel coredns conformance-tools qemu-user helm previous image cni-reference build
	@start=$$(date +%s); \
	$(TEST_ENV) $(GO) test -tags e2e -count=1 -timeout 20m -v ./e2e/ 2>&1 | tee /tmp/vmlane-e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|e2e:|    )' ; \
	rc=$${PIPESTATUS[0]}; echo "e2e: $$(( $$(date +%s) - start ))s in all (log: /tmp/vmlane-e2e.log)"; [ $$rc = 0 ] || exit $$rc; \
	$(MAKE) --no-print-directory e2e-real
	$(MAKE) --no-print-directory e2e-hybrid
	$(MAKE) --no-print-directory e2e-cross

## e2e-cross: the cross-subnet suite alone (node-c behind a router, --cross-subnet=vxlan)
e2e-cross: deps guest controlplane build
	@start=$$(date +%s); \
	$(TEST_ENV) $(GO) test -tags e2e -count=1 -timeout 20m -v $(if $(RUN),-run '$(RUN)') ./e2e/crosssubnet/ 2>&1 | tee /tmp/vmlane-e2e-cross.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|e2e-cross:|•|    )' ; \
	rc=$${PIPESTATUS[0]}; echo "e2e-cross: $$(( $$(date +%s) - start ))s in all (log: /tmp/vmlane-e2e-cross.log)"; exit $$rc

## e2e-hybrid: the hybrid suite alone (flannel on two real nodes, vmlane's routes-only DaemonSet beside it, two VM nodes)
e2e-hybrid: deps guest controlplane realnode flannel image cni-reference build
	@start=$$(date +%s); \
	$(TEST_ENV) $(GO) test -tags e2e -count=1 -timeout 30m -v ./e2e/hybrid/ 2>&1 | tee /tmp/vmlane-e2e-hybrid.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|e2e-hybrid:|•|    )' ; \
	rc=$${PIPESTATUS[0]}; echo "e2e-hybrid: $$(( $$(date +%s) - start ))s in all (log: /tmp/vmlane-e2e-hybrid.log)"; exit $$rc

## e2e-real: the real-node suite alone (containerd, kubelet, the DaemonSet, pods made with kubectl); RUN=REGEXP runs only the tests it matches
e2e-real: deps guest controlplane realnode coredns conformance-tools qemu-user helm previous image cni-reference build
	@# The images the nodes import, checked whole (the unit run, under
	@# -race, reads only the small ones), the arm64 one's programs run
	@# under qemu-aarch64-static.
	$(TEST_ENV) $(GO) test -count=1 -run '^TestBuiltImages$$' ./internal/tools/imagebuild
	@start=$$(date +%s); \
	$(TEST_ENV) $(GO) test -tags e2e -count=1 -timeout 30m -v $(if $(RUN),-run '$(RUN)') ./e2e/realnode/ 2>&1 | tee /tmp/vmlane-e2e-real.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|e2e-realnode:|•|    |conformance:|  FAILED|  skipped|  left out)' ; \
	rc=$${PIPESTATUS[0]}; echo "e2e-real: $$(( $$(date +%s) - start ))s in all (log: /tmp/vmlane-e2e-real.log)"; exit $$rc

lint: helm
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...
	$(GO) run github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION) .github/workflows/*.yml
	@# The chart: helm's own lint (its values against values.schema.json
	@# too), and manifests/ as the chart renders it.
	@helm=$$(bash internal/tools/helm/build.sh --print-dir $(CACHE)/helm); \
	$$helm lint --strict charts/vmlane && bash internal/tools/helm/manifests.sh $$helm check
	@# Every relative link and #anchor of the Markdown files resolves.
	$(GO) run ./internal/tools/mdlinks $$(git ls-files '*.md' 2>/dev/null || find . -name '*.md' -not -path './.cache/*')
	@# leases must stay importable by VM runtimes without our other deps:
	@# what it imports, all the way down, is the standard library and our
	@# small internal packages (which, being in that list, obey it too).
	@# Each system's files count: macOS runtimes build the darwin ones.
	@for os in linux darwin; do \
		deps=$$(GOOS=$$os $(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./leases | grep -Ev '^github.com/vmlane/vmlane/(leases|internal/[a-z0-9]+)$$' || true); \
		if [ -n "$$deps" ]; then echo "leases on $$os imports, directly or not, packages outside the standard library and vmlane's internal ones: $$deps"; exit 1; fi; \
	done

# Privileged tests run here too: `make test` runs as root, and
# VMLANE_PRIVILEGED=require makes a privileged test fail rather than skip
# when something it needs is missing.
unit: build
	$(TEST_ENV) $(GO) test -race -count=1 ./...

## fuzz: every fuzz target for FUZZTIME (default 10s) on top of its corpus
fuzz:
	@set -e; for f in $$(grep -l '^func Fuzz' $$(git ls-files '*_test.go')); do \
		pkg=./$$(dirname $$f); \
		for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -d' ' -f2); do \
			echo "fuzz $$pkg $$t ($(FUZZTIME))"; \
			for try in 1 2; do \
				$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg >/tmp/vmlane-fuzz.log 2>&1 && break; \
				if [ $$try = 1 ] && grep -q 'context deadline exceeded' /tmp/vmlane-fuzz.log && \
					! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' /tmp/vmlane-fuzz.log; then \
					echo "fuzz $$pkg $$t: the fuzz engine's deadline race (golang/go#75804, fixed in Go 1.27), no failing input: once more"; \
					continue; \
				fi; \
				cat /tmp/vmlane-fuzz.log; exit 1; \
			done; \
		done; \
	done

## darwin: the macOS build and vet, and every package's tests compiled for macOS (and run, on a Mac)
darwin:
	@# Without cgo, for both Mac architectures: vmnet, XPC and dispatch
	@# are called through purego (pf/vmnet), so a Linux host builds them.
	for arch in arm64 amd64; do \
		CGO_ENABLED=0 GOOS=darwin GOARCH=$$arch $(GO) build ./... && \
		CGO_ENABLED=0 GOOS=darwin GOARCH=$$arch $(GO) vet ./... || exit 1; \
	done
	@# The real-Mac test (.github/workflows/macos.yml) builds only with its tag.
	GOOS=darwin $(GO) vet -tags realmac ./cmd/vmlaned ./pf/vmnet
	@# Test files run on Linux only where they are portable; _darwin_test
	@# files and the darwin side of every package must still compile.
	@for p in $$(GOOS=darwin $(GO) list ./...); do GOOS=darwin $(GO) test -c -o /dev/null $$p || exit 1; done
	@# On a Mac, also run them: the tests that need root skip without it
	@# (.github/workflows/macos.yml runs those with sudo).
	@if [ "$$(uname -s)" = Darwin ]; then $(GO) test -count=1 ./...; fi

## bench: benchmark tables (lease store; CNI ADD/DEL against bridge+host-local, new and repeated container IDs, with and without vmlaned, and ADD against a bare netlink floor; DHCP and DHCPv6 against dnsmasq and ISC Kea, quiet and with busy guests; anti-spoofing table operations; 5,000-node route sync; routes-only at 5,000 Nodes with 1% VM nodes: label convergence, CPU, RSS; 5,000 Nodes with 10,000 VMs away from home against none: sync, RSS, claim-to-route; BGP: 5,000 prefixes to bird against bird; VXLAN: iperf3 through the tunnel against a direct route; live migration: ten back and forth, ping loss beyond QEMU's downtime, median and worst)
bench: deps bench-deps build cni-reference controlplane
	@mkdir -p $(CACHE)
	set -o pipefail; $(GO) test -run '^$$' -bench . -benchtime 2s ./leases | tee $(CACHE)/bench-leases.txt | $(GO) run ./internal/bench/benchtable
	$(GO) build -o $(CACHE)/bench/ ./internal/bench/netlinkfloor
	set -o pipefail; $(GO) run ./internal/bench/cnibench -vmlane $(BIN)/vmlane -vmlaned $(BIN)/vmlaned -ref $(CNI_PLUGINS_DIR) -floor $(CACHE)/bench/netlinkfloor | tee $(CACHE)/bench-cni.txt
	set -o pipefail; $(GO) run ./internal/bench/dhcpbench -vmlaned $(BIN)/vmlaned | tee $(CACHE)/bench-dhcp.txt
	set -o pipefail; $(GO) run ./internal/bench/dhcpbench -vmlaned $(BIN)/vmlaned -contention both | tee $(CACHE)/bench-dhcp-busy.txt
	set -o pipefail; $(GO) run ./internal/bench/dhcpbench -vmlaned $(BIN)/vmlaned -family 6 | tee $(CACHE)/bench-dhcp6.txt
	set -o pipefail; VMLANE_PRIVILEGED=require $(GO) test -run '^$$' -bench Table -benchtime 30x ./internal/antispoof | tee $(CACHE)/bench-antispoof.txt
	set -o pipefail; $(GO) test -run '^$$' -bench ComputeVMs -benchtime 20x ./routes | tee $(CACHE)/bench-routes-vms.txt
	set -o pipefail; $(GO) test -run '^$$' -bench ClaimsPass -benchmem ./cmd/vmlaned | tee $(CACHE)/bench-claims.txt
	set -o pipefail; $(GO) test -run '^$$' -bench PeerSend -benchtime 20x ./cmd/vmlaned | tee $(CACHE)/bench-peer-send.txt
	set -o pipefail; VMLANE_PRIVILEGED=require $(GO) test -run '^$$' -bench HostRoutes -benchmem ./internal/bridge | tee $(CACHE)/bench-hostroutes.txt
	set -o pipefail; VMLANE_PRIVILEGED=require $(GO) test -run '^$$' -bench AnnounceToBird -benchtime 1x ./routes/bgp | tee $(CACHE)/bench-bgp.txt
	set -o pipefail; VMLANE_PRIVILEGED=require $(GO) test -run '^$$' -bench VXLANThroughput -benchtime 1x ./routes | tee $(CACHE)/bench-vxlan.txt
	set -o pipefail; VMLANE_PRIVILEGED=require VMLANE_BIN_DIR=$(BIN) \
		VMLANE_CONTROLPLANE_DIR=$$(bash internal/testing/controlplane/build.sh --print-dir $(CACHE)/controlplane) \
		$(GO) test -run '^$$' -bench RouteController5000 -benchtime 1x -timeout 20m ./cmd/vmlaned | tee $(CACHE)/bench-routes.txt
	set -o pipefail; VMLANE_PRIVILEGED=require VMLANE_BIN_DIR=$(BIN) \
		VMLANE_CONTROLPLANE_DIR=$$(bash internal/testing/controlplane/build.sh --print-dir $(CACHE)/controlplane) \
		$(GO) test -run '^$$' -bench RoutesOnly5000 -benchtime 1x -timeout 20m ./cmd/vmlaned | tee $(CACHE)/bench-routes-only.txt
	set -o pipefail; VMLANE_PRIVILEGED=require VMLANE_BIN_DIR=$(BIN) \
		VMLANE_CONTROLPLANE_DIR=$$(bash internal/testing/controlplane/build.sh --print-dir $(CACHE)/controlplane) \
		$(GO) test -run '^$$' -bench RouteController5000VMs -benchtime 1x -timeout 20m ./cmd/vmlaned | tee $(CACHE)/bench-routes-vms-api.txt
	@# Live migration on the real-node cluster: ten back and forth, each
	@# vantage's ping loss against QEMU's downtime, the median and worst.
	rm -f $(CACHE)/bench-migration.txt
	VMLANE_MIGRATION_REPORT=$(CACHE)/bench-migration.txt $(MAKE) --no-print-directory e2e-real RUN='^TestVMLiveMigration$$'
	cat $(CACHE)/bench-migration.txt

# One go install makes the reference plugins, cached by version: bridge
# and host-local for `make bench`, and loopback, which a real node's
# runtime package puts in /opt/cni/bin beside vmlane (the real-node e2e).
cni-reference:
	@test -x $(CNI_PLUGINS_DIR)/bridge -a -x $(CNI_PLUGINS_DIR)/host-local -a -x $(CNI_PLUGINS_DIR)/loopback || \
		CGO_ENABLED=0 GOBIN=$(CNI_PLUGINS_DIR) $(GO) install \
			github.com/containernetworking/plugins/plugins/main/bridge@$(CNI_PLUGINS_VERSION) \
			github.com/containernetworking/plugins/plugins/main/loopback@$(CNI_PLUGINS_VERSION) \
			github.com/containernetworking/plugins/plugins/ipam/host-local@$(CNI_PLUGINS_VERSION)

clean:
	rm -rf $(BIN) $(CURDIR)/dist

distclean: clean
	rm -rf $(CACHE)
