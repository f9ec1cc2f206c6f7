// cluster-ip: whether an IP is one of the cluster's own addresses as Go's net package sees them: inside a
// CIDR (net.ParseCIDR, IPNet.Contains), equal to a listed address (net.ParseIP, IP.Equal, IPv4 and
// IPv4-mapped alike), or loopback, unspecified, link-local unicast or multicast (net.IP's own predicates).
// src/csr/cluster.ts answers the same question for the CSR approver's rule 5b.
package main

import (
	"encoding/json"
	"net"
)

type clusterIPInput struct {
	IP    string   `json:"ip"`
	Cidrs []string `json:"cidrs"`
	Exact []string `json:"exact"`
}

// One answer per CIDR: Go cannot read it, or it contains the IP.
type cidrAnswer struct {
	Unreadable bool `json:"unreadable"`
	Contains   bool `json:"contains"`
}

type clusterIPAnswer struct {
	Error string       `json:"error,omitempty"`
	Cidrs []cidrAnswer `json:"cidrs"`
	Exact bool         `json:"exact"`
	// loopback, unspecified, link-local or multicast; "" for none.
	Special string `json:"special"`
}

func init() {
	register("cluster-ip", func(raw json.RawMessage) any {
		var in clusterIPInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return clusterIPAnswer{Error: err.Error()}
		}
		ip := net.ParseIP(in.IP)
		if ip == nil {
			return clusterIPAnswer{Error: "not an IP"}
		}
		answer := clusterIPAnswer{Cidrs: []cidrAnswer{}}
		for _, text := range in.Cidrs {
			_, network, err := net.ParseCIDR(text)
			answer.Cidrs = append(answer.Cidrs, cidrAnswer{Unreadable: err != nil, Contains: err == nil && network.Contains(ip)})
		}
		for _, text := range in.Exact {
			if other := net.ParseIP(text); other != nil && other.Equal(ip) {
				answer.Exact = true
			}
		}
		switch {
		case ip.IsLoopback():
			answer.Special = "loopback"
		case ip.IsUnspecified():
			answer.Special = "unspecified"
		case ip.IsLinkLocalUnicast():
			answer.Special = "link-local"
		case ip.IsMulticast():
			answer.Special = "multicast"
		}
		return answer
	})
}
