module localccm.test/oracle

go 1.26.0

require (
	github.com/mdlayher/arp v0.0.0-20220512170110-6706a2966875
	github.com/mdlayher/ndp v1.1.0
	golang.org/x/net v0.49.0
	k8s.io/apimachinery v0.36.3
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
)

require (
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/josharian/native v1.0.0 // indirect
	github.com/mdlayher/ethernet v0.0.0-20220221185849-529eae5b6118 // indirect
	github.com/mdlayher/packet v1.0.0 // indirect
	github.com/mdlayher/socket v0.2.1 // indirect
	golang.org/x/sync v0.19.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.33.0 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
)
