module github.com/csi-registrar/node-driver-registrar/test/selinuxvm

go 1.26.0

require golang.org/x/sys v0.49.0
