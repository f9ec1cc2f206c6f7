module localccm.test/oracle

go 1.26.0

require (
	k8s.io/apimachinery v0.36.3
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
)
