module github.com/csi-registrar/node-driver-registrar/deploy/monitoring/dashboard

go 1.26.0

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
