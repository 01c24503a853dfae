# The registrar's build, test, demo and release entry points. See CONTRIBUTING.md.

GO        ?= go
# The version stamped into the binaries (--version) and the images' labels:
# the file VERSION (hack/version.sh), the same for every clone and build of a
# commit. Read once; make VERSION=... overrides it.
ifeq ($(origin VERSION),undefined)
VERSION   := $(shell hack/version.sh)
endif
# Expanded only by the builds: a version that could not be computed stops
# them, not make clean.
LDFLAGS    = -s -w -X main.version=$(or $(VERSION),$(error no version: see hack/version.sh's message above, or set VERSION=v<x.y.z>))
# Build tags of the release binaries. Neither changes what the registrar
# does: grpcnotrace leaves out gRPC's request tracing (golang.org/x/net/trace,
# whose html/template makes the linker keep every exported method of every
# type: 2.6 MB), nethttpomithttp2 net/http's own HTTP/2, which the HTTP
# endpoint (HTTP/1.1, no TLS) never speaks (0.3 MB).
GOTAGS    ?= grpcnotrace nethttpomithttp2
BIN       := bin/csi-node-driver-registrar
# How much make fuzz runs each fuzz target, as go test's -fuzztime; make
# test runs them all with the default, make fuzz FUZZTIME=1m longer. A count
# of inputs, not a duration: Go 1.26's fuzzer may fail a target with
# "context deadline exceeded" when a duration runs out on a loaded machine
# (golang/go#75804, fixed in Go 1.27). 20000 inputs take 1-5 s a target here.
FUZZTIME  ?= 20000x
# Every fuzz target, as package:target: go test -fuzz runs one at a time.
FUZZ_TARGETS := \
	./pkg/driver:FuzzValidateName \
	./pkg/driver:FuzzParseAddress \
	./pkg/registration/handover:FuzzHandoverRequest \
	./pkg/registration/handover:FuzzHandoverState \
	./pkg/registration/handover:FuzzReadLine \
	./cmd/registrar:FuzzCommandLine
# The environment the Linux image sets (its ENV lines): make bench runs the
# binary with it, as it runs in its container.
IMAGE_ENV := $(shell sed -n 's/^ENV //p' Dockerfile)
# Extra flags for test/bench, e.g. make bench BENCH_FLAGS='-runs=5 -idle=0'.
BENCH_FLAGS ?=
# test/bench measuring the release binary, run as in its image.
BENCH_PROCESS = $(GO) run ./test/bench -registrar $(BIN) -driver bin/mockdriver -registrar-env '$(IMAGE_ENV)'
# Extra flags for the demo, e.g. make demo DEMO_FLAGS=-duration=10s
DEMO_FLAGS ?=

# What build-all cross-compiles, as GOOS/GOARCH; linux/arm is ARMv7.
# Each binary is $(BIN)-<os>-<arch>, with .exe on Windows: the names the
# Dockerfiles copy.
PLATFORMS ?= linux/amd64 linux/arm64 linux/arm linux/ppc64le linux/s390x windows/amd64

# make image: docker buildx. IMAGE_PLATFORMS is a comma-separated list;
# --load takes a single platform, so a multi-arch build needs
# IMAGE_OUTPUT=--push (or --output=...).
IMAGE           ?= csi-node-driver-registrar
IMAGE_TAG       ?= $(VERSION)
IMAGE_PLATFORMS ?= linux/$(shell $(GO) env GOARCH)
IMAGE_OUTPUT    ?= --load
# Empty: the Dockerfile's default (gcr.io/distroless/static:latest).
BASE_IMAGE      ?=
# make image-windows: one image per Windows release, written as OCI archives
# to _output/ unless WINDOWS_IMAGE_OUTPUT=--push.
WINDOWS_OS_VERSIONS  ?= 1809 ltsc2022
WINDOWS_IMAGE_OUTPUT ?=

# The kubelet releases tested, newest first, from test/kubelet/MINORS (the one
# list; hack/kube-bump.sh adds to it). make e2e runs the suite (test/e2e)
# against each minor's plugin manager and CSI handler, built by its module
# test/kubelet/<minor>, which pins k8s.io/kubernetes; make e2e
# KUBELET_MINORS=v1.36 runs one. See docs/compatibility.md.
KUBELET_RELEASES := $(shell sed -n 's/^\(v1\.[0-9]*\.[0-9][^ ]*\)$$/\1/p' test/kubelet/MINORS)
KUBELET_SUPPORTED := $(foreach r,$(KUBELET_RELEASES),$(word 1,$(subst ., ,$(r))).$(word 2,$(subst ., ,$(r))))
KUBELET_MINORS ?= $(KUBELET_SUPPORTED)

# Every Go module of the repository with Go code: lint covers them all.
# test/node/kubernetes/v1.NN pin a Kubernetes release for make e2e-node
# and hold no code of their own.
MODULES := . test/e2e $(addprefix test/kubelet/,. $(KUBELET_SUPPORTED)) test/deploy test/docs test/fleet test/node test/selinuxvm deploy/monitoring/dashboard
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(CURDIR)/bin/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck
# The SBOM generator of make build-all, CycloneDX's cyclonedx-gomod. It is
# pinned with every dependency's checksum in hack/tools/go.mod (its tool
# line) and built from there: go install name@version would also need the
# module's list of versions, which the module proxy does not always serve.
CYCLONEDX_GOMOD := $(CURDIR)/bin/tools/cyclonedx-gomod

export CGO_ENABLED ?= 0

# Every go test that make runs runs as $(GO_TEST) <go test arguments>, in the
# directory it tests: hack/gotest runs go test -json, prints what go test
# prints without -v, then lists the tests that skipped and why; with CI set
# (not false or 0) a skip fails it, unless hack/gotest expects it everywhere.
# Under make test it also records the skips, and make test lists them all at
# its end.
GO_TEST = $(GO) run -C $(CURDIR) ./hack/gotest -go '$(GO)' -dir "$$PWD" $(if $(SKIPPED),-record $(SKIPPED)) --
ifneq ($(filter test test-all,$(MAKECMDGOALS)),)
SKIPPED := $(CURDIR)/bin/skipped-tests.txt
$(shell rm -f $(SKIPPED))
endif

.PHONY: all build test test-all unit apiserver-test fuzz e2e e2e-newest e2e-older demo vet clean version release-notes release
.PHONY: kube-bump deps-check
.PHONY: handover-compat arch-test selinux-test build-all vet-windows windows-test deploy-test fleet fleet-smoke docs-test lint image image-windows image-check require-buildx e2e-node e2e-storage bench bench-smoke mockdriver metrics-check monitoring-test dashboard dashboard-check

all: build

build:
	$(GO) build -trimpath -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/registrar

# The version make stamps into the binaries and images.
version:
	@echo $(VERSION)

# The notes of a release from CHANGELOG.md: the section of VERSION's version,
# or RELEASE's (make release-notes RELEASE=v0.1.0). See CONTRIBUTING.md.
RELEASE ?=
release-notes:
	@hack/release-notes.sh $(RELEASE)

# A release of the tree, offline, in RELEASE_DIR: one OCI image index of the
# Linux image for RELEASE_PLATFORMS (buildah), the binaries with their SBOMs,
# the release notes and SHA256SUMS; then hack/check-release.sh checks it.
# The base is RELEASE_BASE_IMAGE (scratch: nothing can be pulled offline).
# See hack/release.sh and CONTRIBUTING.md, "Releasing".
RELEASE_DIR        ?= _output/release
RELEASE_PLATFORMS  ?= linux/amd64 linux/arm64 linux/arm/v7 linux/ppc64le linux/s390x
RELEASE_BASE_IMAGE ?= scratch
release:
	VERSION=$(VERSION) RELEASE_DIR=$(RELEASE_DIR) RELEASE_PLATFORMS='$(RELEASE_PLATFORMS)' \
		RELEASE_BASE_IMAGE=$(RELEASE_BASE_IMAGE) hack/release.sh

# Static binaries for every platform of the images, each with its SBOM
# beside it: $(BIN)-<os>-<arch>.cdx.json, CycloneDX JSON of the Go modules
# linked into the binary, read from the binary itself. GOOS and GOARCH give
# the SBOM's package URLs the binary's platform rather than this machine's.
# No serial number or timestamp, so that the same commit gives the same SBOM,
# as it gives the same binary.
build-all: $(CYCLONEDX_GOMOD)
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(BIN)-$$os-$$arch; sbom=$$out.cdx.json; \
		if [ "$$os" = windows ]; then out=$$out.exe; fi; \
		echo "build $$p -> $$out, $$sbom"; \
		GOOS=$$os GOARCH=$$arch GOARM=7 $(GO) build -trimpath -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o $$out ./cmd/registrar; \
		GOOS=$$os GOARCH=$$arch $(CYCLONEDX_GOMOD) bin -json -noserial -notimestamp -version '$(VERSION)' -output $$sbom $$out; \
	done

# What arch-test runs under qemu's user emulation: every Linux platform of
# PLATFORMS but this machine's own, which make test covers.
ARCH_TEST_ARCHES ?= $(filter-out $(shell $(GO) env GOARCH),$(patsubst linux/%,%,$(filter linux/%,$(PLATFORMS))))

# build-all's Linux binaries of ARCH_TEST_ARCHES run under qemu's user
# emulation: --version, the integration suite (test/integration) against
# each, and the product's unit tests built for each. Installs Debian's
# qemu-user-static with apt-get when missing. See hack/arch-test.sh.
arch-test: build-all
	VERSION=$(VERSION) hack/arch-test.sh $(ARCH_TEST_ARCHES)

# The registrar, the test driver and kubelet's plugin manager (fakekubelet)
# as processes in SELinux domains, in a qemu VM whose kernel (Debian's,
# downloaded once with apt-get download, not installed) enforces
# test/selinuxvm/policy.cil: what the kernel allows and denies next to what
# the registrar reports. Installs qemu-system-x86, secilc and cpio with
# apt-get when missing; says SKIPPED where it cannot (fails under CI). See
# hack/selinux-vm.sh and test/selinuxvm/README.md.
selinux-test:
	hack/selinux-vm.sh

$(CYCLONEDX_GOMOD): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(GO) build -o $@ github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod

# The product module for Windows: vet, and compile every package's tests.
vet-windows:
	GOOS=windows GOARCH=amd64 $(GO) vet ./...
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
		echo "GOOS=windows GOARCH=amd64 $(GO) test -c ./..." && \
		GOOS=windows GOARCH=amd64 $(GO) test -c -o "$$out/" ./...

# The registrar built for Windows, run under Wine: --version, --help, the
# HTTP endpoint waiting for its driver, Ctrl-C; then the product's unit
# tests built for Windows, the tests that need AF_UNIX (which Wine lacks)
# skipped. Installs Debian's wine, and mingw-w64 for Wine 8's missing
# ProcessPrng, with apt-get when missing. See hack/windows-test.sh.
windows-test:
	VERSION=$(VERSION) GOTAGS='$(GOTAGS)' hack/windows-test.sh

vet:
	hack/progress.sh "vetting the product module" $(GO) vet -tags apiserver ./...
	hack/progress.sh "vetting test/e2e" $(GO) vet -C test/e2e -tags monitoring ./...

# test/node's kube-apiserver, which pkg/features/nodegate's and test/deploy's tests
# run (test/apiserver): built here rather than inside go test, whose
# 10-minute timeout a cold build on two loaded cores can exceed.
KUBE_APISERVER_BIN := test/node/_bin/kube-apiserver
$(KUBE_APISERVER_BIN): test/node/go.mod test/node/go.sum
	@echo "building kube-apiserver from test/node for the tests against an API server (from an empty build cache: about 15 min on two cores)"
	CGO_ENABLED=0 GOOS= GOARCH= GOARM= hack/progress.sh "building kube-apiserver" \
		$(GO) build -C test/node -trimpath -o _bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

# Unit and integration tests of the product module, under the race detector.
unit:
	CGO_ENABLED=1 $(GO_TEST) -race -count=1 ./...

# The API features' tests against a real kube-apiserver and etcd (build tag
# apiserver; test/apiserver): kube-apiserver is built from test/node first.
apiserver-test: $(KUBE_APISERVER_BIN)
	CGO_ENABLED=1 $(GO_TEST) -race -count=1 -tags apiserver -run '^TestAgainstKubeAPIServer$$' ./pkg/features/csinode ./pkg/features/nodegate ./pkg/features/events

# Each fuzz target for FUZZTIME; the first failure stops make, and go test
# prints the input and writes it to the package's testdata/fuzz/. go test
# passes when -fuzz matches nothing: a target missing from the list, or
# listed but not there, fails here instead.
fuzz:
	@for f in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' cmd internal pkg | cut -d' ' -f2); do \
		case " $(FUZZ_TARGETS) " in *":$$f "*) ;; *) echo "make fuzz: $$f is not in FUZZ_TARGETS" >&2; exit 1;; esac; \
	done
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; target=$${t#*:}; \
		grep -qs "^func $$target(" $$pkg/*_test.go || { echo "make fuzz: no $$target in $$pkg" >&2; exit 1; }; \
		echo "$(GO) test -run '^\$$' -fuzz='^$$target\$$' -fuzztime=$(FUZZTIME) $$pkg"; \
		$(GO_TEST) -run '^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done

# The last build whose handover messages carry no version (the version
# field came in the next commit); make handover-compat hands the socket over
# between it and this build, both ways. It needs that commit in the clone:
# without it, it fails, or with HANDOVER_IF_MISSING=skip says SKIPPED and
# why (.ci/run, after trying git fetch --unshallow).
HANDOVER_PREVIOUS ?= c6bdcb4e8d86e3f6c443d08a13c0bd96f52ed9c9
HANDOVER_IF_MISSING ?= fail
handover-compat:
	@set -e; if ! git cat-file -e '$(HANDOVER_PREVIOUS)^{commit}' 2>/dev/null; then \
		echo "make handover-compat: commit $(HANDOVER_PREVIOUS) is not in this clone (a shallow clone? git fetch --unshallow)" >&2; \
		if [ '$(HANDOVER_IF_MISSING)' = skip ]; then echo "make handover-compat: SKIPPED: the previous build's source is not in this clone" >&2; exit 0; fi; \
		exit 1; \
	fi; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git archive $(HANDOVER_PREVIOUS) | tar -x -C "$$tmp"; \
	(cd "$$tmp" && $(GO) build -o previous-registrar ./cmd/registrar); \
	cd test/integration && PREVIOUS_REGISTRAR_BIN="$$tmp/previous-registrar" CGO_ENABLED=1 $(GO_TEST) -race -count=1 -run '^TestHandsOverBetweenBuilds$$' .

# kubelet's own plugin manager and CSI handler against the release binary,
# for each of KUBELET_MINORS (make e2e KUBELET_MINORS=v1.36 runs one).
e2e: build
	$(call e2e_against,$(KUBELET_MINORS))

# make e2e against the newest kubelet minor alone (make test), and against
# the others (make test-all).
e2e-newest: build
	$(call e2e_against,$(firstword $(KUBELET_MINORS)))
e2e-older: build
	$(call e2e_against,$(wordlist 2,$(words $(KUBELET_MINORS)),$(KUBELET_MINORS)))

# e2e_against runs test/e2e against each kubelet minor of $(1).
define e2e_against
	@set -e; for m in $(1); do \
		[ -f test/kubelet/$$m/go.mod ] || { echo "make e2e: no module test/kubelet/$$m; tested: $(KUBELET_SUPPORTED) (hack/kube-bump.sh adds one)" >&2; exit 1; }; \
		echo "make e2e: kubelet $$m (test/kubelet/$$m, k8s.io/kubernetes $$(sed -nE 's/^(require )?[[:space:]]*k8s\.io\/kubernetes (v[^ ]*)$$/\2/p' test/kubelet/$$m/go.mod))"; \
		hack/progress.sh "building kubelet $$m's plugin manager (fakekubelet)" \
			$(GO) build -C test/kubelet/$$m -ldflags=-w -o $(CURDIR)/bin/fakekubelet-$$m .; \
		(cd test/e2e && FAKEKUBELET_BIN=$(CURDIR)/bin/fakekubelet-$$m REGISTRAR_BIN=$(CURDIR)/$(BIN) CGO_ENABLED=1 $(GO_TEST) -race -count=1 ./...); \
	done
endef

# The example manifests in deploy/: strict decoding and wiring checks, and
# a server-side dry run of every rendering against a real kube-apiserver
# (test/apiserver: etcd from PATH, kube-apiserver built from test/node when
# missing; skipped without them, failing under CI).
deploy-test: $(KUBE_APISERVER_BIN)
	cd test/deploy && $(GO) vet ./...
	cd test/deploy && CGO_ENABLED=1 $(GO_TEST) -race -count=1 ./...

# What the API features cost a kube-apiserver with FLEET_N Nodes, each with a
# simulated kubelet and the registrar's node gate and CSINode confirmation
# (test/fleet): a rest, a rolling update, a 60 s outage of the API server,
# 1 % of the Nodes replaced; prints the figures and issue 45's goals, and
# fails when a hard goal is missed (docs/performance.md, "At fleet scale").
# By hand with the defaults below; N of 500 and more on an idle machine.
FLEET_N ?= 100
FLEET_BASELINE ?= 2m
FLEET_REST ?= 12m
FLEET_FLAGS ?=
fleet: $(KUBE_APISERVER_BIN)
	$(GO) vet -C test/fleet ./...
	cd test/fleet && $(GO_TEST) -count=1 ./...
	$(GO) run -C test/fleet . -n $(FLEET_N) -baseline $(FLEET_BASELINE) -rest $(FLEET_REST) $(FLEET_FLAGS)

# make fleet in CI: N = 100 and short rests (no watch renewal falls in
# them), a few minutes, most of them the outage and the recovery.
fleet-smoke:
	$(MAKE) fleet FLEET_N=100 FLEET_BASELINE=15s FLEET_REST=30s

# The Markdown documents as GitHub renders them: every relative link and
# #anchor resolves, every repository path a YAML comment names exists,
# the README's flags table is the binary's flags, and
# CONTRIBUTING.md's table of make targets is the Makefile's. A
# module of its own (the goldmark parser). See CONTRIBUTING.md.
docs-test:
	cd test/docs && $(GO) vet ./...
	cd test/docs && CGO_ENABLED=1 $(GO_TEST) -race -count=1 ./...

# A contributor's loop: what needs no Kubernetes build but one kubelet
# minor's plugin manager. The fuzz targets' seed corpora run with the unit
# tests; fuzzing itself, which builds an instrumented binary per target, is
# make test-all's. The last lines list the tests that skipped, and say that
# everything passed; make stops at the first failure.
test: vet unit e2e-newest docs-test
	@if [ -s $(SKIPPED) ]; then echo "make test: skipped tests (package, test, reason):"; sed 's/^/  /' $(SKIPPED); \
		else echo "make test: no test skipped"; fi
	@echo "make test: all checks passed ($^)"

# Everything make test runs, and what needs more Kubernetes builds: the
# tests against a real kube-apiserver, the other kubelet minors, the
# manifests against the API server, the fuzz targets on FUZZTIME inputs,
# make fleet at N = 100, the benchmarks once each, and the monitoring
# component on a real Prometheus. .ci/run runs it.
test-all: test fuzz apiserver-test e2e-older deploy-test fleet-smoke bench-smoke monitoring-test
	@if [ -s $(SKIPPED) ]; then echo "make test-all: skipped tests (package, test, reason):"; sed 's/^/  /' $(SKIPPED); \
		else echo "make test-all: no test skipped"; fi
	@echo "make test-all: all checks passed ($^)"

# gofmt, go vet and staticcheck on every module, the tests of build tags
# apiserver and monitoring included; staticcheck also on the product module
# as built for Windows.
lint: $(STATICCHECK)
	@files=$$(gofmt -l .); if [ -n "$$files" ]; then \
		echo "gofmt: these files are not formatted (gofmt -w FILE):" >&2; echo "$$files" >&2; exit 1; fi
	@set -e; for m in $(MODULES); do \
		echo "lint: $$m"; (cd $$m && $(GO) vet -tags apiserver,monitoring ./... && $(STATICCHECK) -tags apiserver,monitoring ./...); \
	done
	GOOS=windows GOARCH=amd64 $(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Fails with a clear message where there is no Docker engine with buildx.
require-buildx:
	@command -v docker >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS): no docker command here; it needs Docker with buildx. Without Docker, make image-check builds the image with buildah and checks it." >&2; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS): no Docker engine reachable (docker info failed); it needs Docker with buildx. Without Docker, make image-check builds the image with buildah and checks it." >&2; exit 1; }
	@docker buildx version >/dev/null 2>&1 || { echo "make $(MAKECMDGOALS): docker buildx is not installed." >&2; exit 1; }

# The Linux image, for IMAGE_PLATFORMS, with docker buildx.
image: require-buildx build-all
	docker buildx build --platform $(IMAGE_PLATFORMS) --build-arg VERSION=$(VERSION) \
		$(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
		-t $(IMAGE):$(IMAGE_TAG) $(IMAGE_OUTPUT) -f Dockerfile .

# The Windows images, one per WINDOWS_OS_VERSIONS, with docker buildx.
image-windows: require-buildx build-all
	@set -e; mkdir -p _output; for v in $(WINDOWS_OS_VERSIONS); do \
		output="$(WINDOWS_IMAGE_OUTPUT)"; \
		if [ -z "$$output" ]; then output=--output=type=oci,dest=_output/csi-node-driver-registrar-windows-$$v.tar; fi; \
		echo "docker buildx build --platform windows/amd64 -f Dockerfile.Windows --build-arg OS_VERSION=$$v ... $$output"; \
		docker buildx build --platform windows/amd64 -f Dockerfile.Windows --build-arg OS_VERSION=$$v \
			--build-arg VERSION=$(VERSION) -t $(IMAGE):$(IMAGE_TAG)-windows-$$v $$output .; \
	done

# Builds both Dockerfiles offline with buildah (installed with apt-get when
# missing) on stand-in bases, and checks the images: entrypoint, labels, the
# files in them, and that the binary in the Linux image runs.
image-check:
	VERSION=$(VERSION) hack/check-image.sh

# The demo builds the binaries it runs, the registrar with VERSION. It is
# built, then run in the recipe's shell's place (exec), so that a Ctrl-C it
# stops at cleanly ends make quietly: go run exits 1 after a SIGINT whatever
# the program did (make: "Error 1"), and a shell between make and the demo
# dies of the SIGINT (make: "Interrupt").
demo:
	@echo "make demo: compiling the demo program (go build -v: each package it compiles, none once cached); it then builds the binaries it runs"
	cd test/e2e && $(GO) build -v -o $(CURDIR)/bin/demo ./cmd/demo
	cd test/e2e && REGISTRAR_VERSION=$(VERSION) exec $(CURDIR)/bin/demo $(DEMO_FLAGS)

# Performance figures on this machine next to their targets: the in-process
# benchmarks, then the release binary as a process (test/bench). Figures are
# printed, never asserted. See docs/performance.md.
bench: build mockdriver
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./pkg/... ./internal/...
	$(BENCH_PROCESS) -upstream=../shared/interop/upstream-csi-node-driver-registrar $(BENCH_FLAGS)

# make bench's code on a tiny load (each benchmark once, one run of each
# figure, a 1 s idle wait), so that a broken benchmark fails make test. Its
# figures mean nothing: the benchmarks' output is shown only on failure.
# Upstream's registrar runs next to ours here too, so that the ratios' code
# runs; without it, a warning, and under CI=true a failure.
bench-smoke: build mockdriver $(KUBE_APISERVER_BIN)
	$(GO_TEST) -run '^$$' -bench . -benchtime=1x -count=1 -tags apiserver ./pkg/... ./internal/... > bin/bench-smoke.out || { cat bin/bench-smoke.out; exit 1; }
	$(BENCH_PROCESS) -upstream=../shared/interop/upstream-csi-node-driver-registrar $(if $(filter true,$(CI)),-require-upstream) -runs=1 -idle=1s -healthz-requests=20 -getinfo-calls=64 -flood-header-conns=4 -flood-idle-conns=16 -flood-hold=100ms > /dev/null

# A running registrar's /metrics through `promtool check metrics`, which
# fails on any problem. Installs Debian's prometheus package (promtool) with
# apt-get when promtool is missing. See hack/check-metrics.sh.
metrics-check: build mockdriver
	hack/check-metrics.sh

# deploy/monitoring: the alerts through `promtool test rules` (each fires
# and clears when docs/monitoring.md says; hack/monitoring-test.sh), the
# dashboard against its generator (dashboard-check), and every query of the
# dashboard on Debian's Prometheus scraping registrars between the mock
# driver and the newest kubelet's plugin manager, two of them with
# --confirm-csinode on test/node's kube-apiserver (test/e2e/monitoring,
# build tag monitoring). Installs Debian's prometheus package (prometheus
# and promtool) with apt-get when missing.
MONITORING_KUBELET := $(firstword $(KUBELET_SUPPORTED))
monitoring-test: build mockdriver dashboard-check $(KUBE_APISERVER_BIN)
	hack/monitoring-test.sh
	hack/progress.sh "building kubelet $(MONITORING_KUBELET)'s plugin manager (fakekubelet)" \
		$(GO) build -C test/kubelet/$(MONITORING_KUBELET) -ldflags=-w -o $(CURDIR)/bin/fakekubelet-$(MONITORING_KUBELET) .
	cd test/e2e && REGISTRAR_BIN=$(CURDIR)/$(BIN) MOCKDRIVER_BIN=$(CURDIR)/bin/mockdriver \
		FAKEKUBELET_BIN=$(CURDIR)/bin/fakekubelet-$(MONITORING_KUBELET) $(GO_TEST) -tags monitoring -count=1 ./monitoring

# deploy/monitoring's Grafana dashboard (dashboard.json and the ConfigMap
# grafana-dashboard.yaml), written by its generator, deploy/monitoring/dashboard
# (a module of its own: Grafana's foundation SDK). make dashboard-check
# writes them into a temporary directory and fails when the committed
# files differ.
DASHBOARD_FILES := dashboard.json grafana-dashboard.yaml
dashboard:
	cd deploy/monitoring/dashboard && $(GO) run . -out ..

dashboard-check:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		(cd deploy/monitoring/dashboard && $(GO) run . -out "$$tmp") && \
		for f in $(DASHBOARD_FILES); do \
			diff -u deploy/monitoring/$$f "$$tmp/$$f" || { echo "make dashboard-check: deploy/monitoring/$$f is not what deploy/monitoring/dashboard writes: run make dashboard and commit the result" >&2; exit 1; }; \
		done; echo "make dashboard-check: deploy/monitoring's $(DASHBOARD_FILES) are the generator's"

# The test CSI driver that make bench starts next to the registrar.
mockdriver:
	$(GO) build -o bin/mockdriver ./test/mockdriver

# The registrar's image as the sidecar of a CSI driver's DaemonSet under a
# real kubelet, apiserver, controller-manager and scheduler on this machine,
# in namespaces of their own, of Kubernetes KUBE_VERSION: empty, test/node's
# (the newest supported, v1.37.1); else one that a module
# test/node/kubernetes/v1.NN pins (v1.33.13, v1.32.13, v1.30.14; CI runs the
# oldest of test/kubelet/MINORS). Needs root; installs
# etcd-server, containerd, runc and buildah with apt-get when missing. See
# hack/e2e-node.sh and test/node/README.md.
KUBE_VERSION ?=
e2e-node:
	VERSION=$(VERSION) KUBE_VERSION=$(KUBE_VERSION) hack/e2e-node.sh

# A Kubernetes release into the matrix: make kube-bump VERSION=v1.38.0 writes
# test/kubelet/v1.38 (from the nearest minor's), tidies and builds it, adds
# it to test/kubelet/MINORS (a prerelease stays out: run by hand) and prints
# what to review. VERSION here is the Kubernetes release, not the
# registrar's. See hack/kube-bump.sh.
kube-bump:
	@$(if $(filter command line,$(origin VERSION)),,echo "make kube-bump: give the Kubernetes release: make kube-bump VERSION=v1.X.Y" >&2; exit 2;)
	hack/kube-bump.sh $(VERSION)

# How far behind the dependencies are, as the module proxy serves them: the
# product module's modules with newer versions, the Go toolchain, the k8s.io
# minor. One summary line; fails only on a k8s.io minor two or more behind or
# a Go release out of support; says so and passes when the proxy cannot be
# reached. See hack/deps-check.sh.
deps-check:
	hack/deps-check.sh

# Kubernetes' own storage e2e suite (e2e.test, built unmodified from
# k8s.io/kubernetes at test/node's version) on make e2e-node's node: the
# tests of csi-driver-host-path's plugin with this registrar's image as its
# node sidecar, then with upstream's. E2E_STORAGE_TIERS picks the tiers
# (default "1 2"). Needs root; the same packages as e2e-node, and Debian's
# containernetworking-plugins. See docs/storage-e2e.md.
e2e-storage:
	VERSION=$(VERSION) hack/e2e-node.sh storage

# bin/, and the kubelet and control plane that make e2e-node and
# pkg/features/nodegate's test build into test/node/_bin (about 170 MB).
clean:
	rm -rf bin test/node/_bin
