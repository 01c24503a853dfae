# The registrar's Linux image. It packages a binary built beforehand by
# `make build-all` (bin/csi-node-driver-registrar-<os>-<arch>), so building the
# image needs no Go toolchain; `make image` does both.
#
# The binary is static (CGO_ENABLED=0): any base works. The default is the one
# upstream uses; pin it by digest with --build-arg BASE_IMAGE=...@sha256:...
ARG BASE_IMAGE=gcr.io/distroless/static:latest

FROM ${BASE_IMAGE}

# Set by docker buildx and buildah from --platform.
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=unknown

LABEL org.opencontainers.image.source="https://github.com/csi-registrar/node-driver-registrar" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.title="csi-node-driver-registrar" \
      org.opencontainers.image.description="Registers a CSI driver with kubelet: a drop-in replacement for the Kubernetes CSI node-driver-registrar sidecar" \
      description="CSI node driver registrar"

# The path upstream's image uses: exec probes and `command:` overrides in
# existing manifests call /csi-node-driver-registrar.
COPY bin/csi-node-driver-registrar-${TARGETOS}-${TARGETARCH} /csi-node-driver-registrar

# One P: the registrar serves one request at a time, and with one P each
# costs less CPU and the process less memory (docs/performance.md). A pod's
# own GOMAXPROCS or --automaxprocs takes precedence. make bench runs the
# binary with this line's environment.
ENV GOMAXPROCS=1

ENTRYPOINT ["/csi-node-driver-registrar"]
