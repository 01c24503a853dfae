module github.com/csi-registrar/node-driver-registrar/test/docs

go 1.26.0

require github.com/yuin/goldmark v1.8.7
