// portrange: port ranges as kube-apiserver reads --service-node-port-range (k8s.io/apimachinery's
// utilnet.PortRange.Set), for --lb-node-port-range.
package main

import (
	"encoding/json"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

type portRangeAnswer struct {
	Error string `json:"error,omitempty"`
	Base  int    `json:"base"`
	Size  int    `json:"size"`
}

func init() {
	register("port-range", func(raw json.RawMessage) any {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		var pr utilnet.PortRange
		if err := pr.Set(text); err != nil {
			return portRangeAnswer{Error: err.Error()}
		}
		return portRangeAnswer{Base: pr.Base, Size: pr.Size}
	})
}
