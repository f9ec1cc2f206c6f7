// neighbor: ARP packets and NDP messages as MetalLB's speaker reads and writes them in L2 mode
// (github.com/mdlayher/arp Packet, github.com/mdlayher/ndp ParseMessage and MarshalMessage), and whole IPv6
// packets of NDP as golang.org/x/net/ipv6 reads their header and ndp.MarshalMessageChecksum checksums them.
package main

import (
	"encoding/hex"
	"encoding/json"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"
)

// A question: op "arp" reads hex as an ARP packet, "arpBuild" builds one from Packet, "ndp" reads hex as an
// NDP message (ICMPv6 type byte first), "ipv6" reads hex as an IPv6 packet carrying one.
type neighborInput struct {
	Op     string     `json:"op"`
	Hex    string     `json:"hex"`
	Packet *arpPacket `json:"packet"`
}

type arpPacket struct {
	Error        string `json:"error,omitempty"`
	HardwareType uint16 `json:"hardwareType"`
	ProtocolType uint16 `json:"protocolType"`
	Operation    uint16 `json:"operation"`
	SenderMac    string `json:"senderMac"`
	SenderIP     string `json:"senderIp"`
	TargetMac    string `json:"targetMac"`
	TargetIP     string `json:"targetIp"`
}

type ndpMessage struct {
	Error     string `json:"error,omitempty"`
	Type      string `json:"type,omitempty"`
	Target    string `json:"target,omitempty"`
	Solicited bool   `json:"solicited,omitempty"`
	Override  bool   `json:"override,omitempty"`
	Router    bool   `json:"router,omitempty"`
	// The first link-layer address option of each direction.
	SourceMac string `json:"sourceMac,omitempty"`
	TargetMac string `json:"targetMac,omitempty"`
}

func init() {
	register("neighbor", func(raw json.RawMessage) any {
		var input neighborInput
		if err := json.Unmarshal(raw, &input); err != nil {
			return map[string]string{"error": err.Error()}
		}
		switch input.Op {
		case "arp":
			return readArp(input.Hex)
		case "arpBuild":
			return buildArp(input.Packet)
		case "ipv6":
			return readIPv6(input.Hex)
		default:
			return readNdp(input.Hex)
		}
	})
}

func readArp(text string) arpPacket {
	data, _ := hex.DecodeString(text)
	var packet arp.Packet
	if err := packet.UnmarshalBinary(data); err != nil {
		return arpPacket{Error: err.Error()}
	}
	return arpPacket{
		HardwareType: packet.HardwareType,
		ProtocolType: packet.ProtocolType,
		Operation:    uint16(packet.Operation),
		SenderMac:    packet.SenderHardwareAddr.String(),
		SenderIP:     packet.SenderIP.String(),
		TargetMac:    packet.TargetHardwareAddr.String(),
		TargetIP:     packet.TargetIP.String(),
	}
}

// The hex of arp.NewPacket(...).MarshalBinary(), as the speaker sends replies and gratuitous ARP.
func buildArp(p *arpPacket) map[string]string {
	senderMac, err1 := net.ParseMAC(p.SenderMac)
	targetMac, err2 := net.ParseMAC(p.TargetMac)
	senderIP, err3 := netip.ParseAddr(p.SenderIP)
	targetIP, err4 := netip.ParseAddr(p.TargetIP)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
	}
	packet, err := arp.NewPacket(arp.Operation(p.Operation), senderMac, senderIP, targetMac, targetIP)
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	data, err := packet.MarshalBinary()
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	return map[string]string{"hex": hex.EncodeToString(data)}
}

func readNdp(text string) ndpMessage {
	data, _ := hex.DecodeString(text)
	message, err := ndp.ParseMessage(data)
	if err != nil {
		return ndpMessage{Error: err.Error()}
	}
	var answer ndpMessage
	var options []ndp.Option
	switch m := message.(type) {
	case *ndp.NeighborSolicitation:
		answer = ndpMessage{Type: "solicitation", Target: m.TargetAddress.String()}
		options = m.Options
	case *ndp.NeighborAdvertisement:
		answer = ndpMessage{Type: "advertisement", Target: m.TargetAddress.String(), Solicited: m.Solicited,
			Override: m.Override, Router: m.Router}
		options = m.Options
	default:
		return ndpMessage{Type: "other"}
	}
	for _, option := range options {
		lla, ok := option.(*ndp.LinkLayerAddress)
		if ok && lla.Direction == ndp.Source && answer.SourceMac == "" {
			answer.SourceMac = lla.Addr.String()
		} else if ok && lla.Direction == ndp.Target && answer.TargetMac == "" {
			answer.TargetMac = lla.Addr.String()
		}
	}
	return answer
}

type ipv6Packet struct {
	Error       string `json:"error,omitempty"`
	Version     int    `json:"version"`
	PayloadLen  int    `json:"payloadLen"`
	NextHeader  int    `json:"nextHeader"`
	HopLimit    int    `json:"hopLimit"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
	// ndp.SolicitedNodeMulticast of the message's target.
	SolicitedNode string `json:"solicitedNode,omitempty"`
	// The message re-marshalled with the checksum of its addresses is the bytes sent.
	ChecksumOk bool       `json:"checksumOk"`
	Message    ndpMessage `json:"message"`
}

func readIPv6(text string) ipv6Packet {
	data, _ := hex.DecodeString(text)
	header, err := ipv6.ParseHeader(data)
	if err != nil {
		return ipv6Packet{Error: err.Error()}
	}
	answer := ipv6Packet{Version: header.Version, PayloadLen: header.PayloadLen, NextHeader: header.NextHeader,
		HopLimit: header.HopLimit, Source: header.Src.String(), Destination: header.Dst.String()}
	payload := data[ipv6.HeaderLen:]
	answer.Message = readNdp(hex.EncodeToString(payload))
	message, err := ndp.ParseMessage(payload)
	if err != nil {
		return answer
	}
	source, _ := netip.AddrFromSlice(header.Src)
	destination, _ := netip.AddrFromSlice(header.Dst)
	if ns, ok := message.(*ndp.NeighborSolicitation); ok {
		if group, err := ndp.SolicitedNodeMulticast(ns.TargetAddress); err == nil {
			answer.SolicitedNode = group.String()
		}
	}
	again, err := ndp.MarshalMessageChecksum(message, source, destination)
	answer.ChecksumOk = err == nil && hex.EncodeToString(again) == hex.EncodeToString(payload)
	return answer
}
