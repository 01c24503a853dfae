# The registrar's build, test and demo entry points. See README.md.

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := bin/csi-node-driver-registrar
FUZZTIME  ?= 10s
# Extra flags for the demo, e.g. make demo DEMO_FLAGS=-duration=10s
DEMO_FLAGS ?=

export CGO_ENABLED ?= 0

.PHONY: all build test unit fuzz e2e demo vet clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/registrar

vet:
	$(GO) vet ./...
	cd test/e2e && $(GO) vet ./...

# Unit and integration tests of the product module, under the race detector.
unit:
	CGO_ENABLED=1 $(GO) test -race -count=1 ./...

# A short fuzzing run of the driver name validation.
fuzz:
	$(GO) test -run '^$$' -fuzz=FuzzValidateName -fuzztime=$(FUZZTIME) ./pkg/driver

# kubelet's own plugin manager and CSI handler against the built binary.
e2e:
	cd test/e2e && CGO_ENABLED=1 $(GO) test -race -count=1 ./...

test: vet unit fuzz e2e

demo:
	cd test/e2e && $(GO) run ./cmd/demo $(DEMO_FLAGS)

clean:
	rm -rf bin
