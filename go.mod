module github.com/csi-registrar/node-driver-registrar

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.13.0
	github.com/fsnotify/fsnotify v1.9.0
	github.com/go-logr/logr v1.4.4
	github.com/kubernetes-csi/csi-test/v5 v5.6.0
	github.com/moby/sys/mountinfo v0.7.2
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.72.0
	go.uber.org/automaxprocs v1.6.0
	go.uber.org/mock v0.6.0
	golang.org/x/sync v0.24.0
	golang.org/x/sys v0.49.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
	k8s.io/klog/v2 v2.140.0
	k8s.io/kubelet v0.37.2
	k8s.io/utils v0.0.0-20260626114624-be93311217bd
)

require (
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260825221802-da73d73af1c5 // indirect
)
