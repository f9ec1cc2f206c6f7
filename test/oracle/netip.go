// netip: IP addresses and prefixes as Go reads and prints them (net/netip, net.IP), as Kubernetes reads Node
// addresses and kubelet's --node-ip (k8s.io/utils/net ParseIPSloppy), and as kube-apiserver validates IP and
// CIDR fields (k8s.io/apimachinery/pkg/util/validation with strict validation, on by default since 1.36).
package main

import (
	"encoding/json"
	"net"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// A question: op "addr" reads text as an IP, "prefix" reads text as a prefix and asks whether it contains each
// of ips, "bytes" prints bytes (a JSON array of numbers) as an IP.
type netipInput struct {
	Op    string   `json:"op"`
	Text  string   `json:"text"`
	Bytes []int    `json:"bytes"`
	IPs   []string `json:"ips"`
}

type netipAddr struct {
	Error  string `json:"error,omitempty"`
	String string `json:"string,omitempty"`
	Is4In6 bool   `json:"is4in6,omitempty"`
	Zone   string `json:"zone,omitempty"`
}

type netipPrefix struct {
	Error  string `json:"error,omitempty"`
	String string `json:"string,omitempty"`
	Addr   string `json:"addr,omitempty"`
	Bits   int    `json:"bits"`
	Masked string `json:"masked,omitempty"`
	// For each of the input's ips: whether the prefix contains it; null when netip.ParseAddr refuses it.
	Contains []*bool `json:"contains,omitempty"`
}

type netipAnswer struct {
	Addr *netipAddr `json:"addr,omitempty"`
	// net.IP.String() of what ParseIPSloppy reads; absent when it reads nothing.
	Sloppy *string `json:"sloppy,omitempty"`
	// kube-apiserver's refusal of the text as an IP or CIDR (IsValidIPForLegacyField, IsValidCIDRForLegacyField, strict);
	// absent when valid.
	Invalid *string      `json:"invalid,omitempty"`
	Prefix  *netipPrefix `json:"prefix,omitempty"`
	// Bytes as netip.AddrFromSlice and net.IP print them.
	AddrString  string `json:"addrString,omitempty"`
	NetIPString string `json:"netIPString,omitempty"`
}

func invalid(errs field.ErrorList) *string {
	if len(errs) == 0 {
		return nil
	}
	text := errs.ToAggregate().Error()
	return &text
}

func init() {
	register("netip", func(raw json.RawMessage) any {
		var input netipInput
		if err := json.Unmarshal(raw, &input); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		path := field.NewPath("ip")
		switch input.Op {
		case "addr":
			answer := netipAnswer{Addr: &netipAddr{}}
			if addr, err := netip.ParseAddr(input.Text); err != nil {
				answer.Addr.Error = err.Error()
			} else {
				answer.Addr = &netipAddr{String: addr.String(), Is4In6: addr.Is4In6(), Zone: addr.Zone()}
			}
			if ip := netutils.ParseIPSloppy(input.Text); ip != nil {
				text := ip.String()
				answer.Sloppy = &text
			}
			answer.Invalid = invalid(validation.IsValidIPForLegacyField(path, input.Text, true, nil))
			return answer
		case "prefix":
			answer := netipAnswer{Prefix: &netipPrefix{}}
			prefix, err := netip.ParsePrefix(input.Text)
			if err != nil {
				answer.Prefix.Error = err.Error()
			} else {
				answer.Prefix = &netipPrefix{
					String: prefix.String(),
					Addr:   prefix.Addr().String(),
					Bits:   prefix.Bits(),
					Masked: prefix.Masked().String(),
				}
				for _, text := range input.IPs {
					var contains *bool
					if addr, err := netip.ParseAddr(text); err == nil {
						value := prefix.Contains(addr)
						contains = &value
					}
					answer.Prefix.Contains = append(answer.Prefix.Contains, contains)
				}
			}
			answer.Invalid = invalid(validation.IsValidCIDRForLegacyField(path, input.Text, true, nil))
			return answer
		case "bytes":
			bytes := make([]byte, len(input.Bytes))
			for i, value := range input.Bytes {
				bytes[i] = byte(value)
			}
			answer := netipAnswer{NetIPString: net.IP(bytes).String()}
			if addr, ok := netip.AddrFromSlice(bytes); ok {
				answer.AddrString = addr.String()
			}
			return answer
		}
		return map[string]string{"inputError": "op must be addr, prefix or bytes"}
	})
}
