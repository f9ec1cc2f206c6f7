// csr: a CertificateSigningRequest's spec.request read as kube-apiserver (CSR validation) and
// kube-controller-manager's signer read it: k8s.io/kubernetes pkg/apis/certificates/v1 ParseCSR, that is
// pem.Decode (the first block), its type "CERTIFICATE REQUEST", then x509.ParseCertificateRequest of its
// bytes. The signer then issues the subject and SANs read here (after CheckSignature).
package main

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
)

type csrName struct {
	Type string `json:"type"`
	// Value is the text when Go read a string; else Kind names the Go type it read (or "nil").
	Value *string `json:"value,omitempty"`
	Kind  string  `json:"kind,omitempty"`
}

type csrAnswer struct {
	// What pem.Decode found: the first block's type, whether text is left after it, how many blocks in all.
	PemFound     bool   `json:"pemFound"`
	PemType      string `json:"pemType"`
	PemRestEmpty bool   `json:"pemRestEmpty"`
	PemBlocks    int    `json:"pemBlocks"`
	PemHeaders   int    `json:"pemHeaders"`

	OK           bool      `json:"ok"`
	Error        string    `json:"error,omitempty"`
	SignatureOK  bool      `json:"signatureOk"`
	CommonName   string    `json:"commonName"`
	Organization []string  `json:"organization"`
	Names        []csrName `json:"names"`
	DNS          []string  `json:"dns"`
	IP           []string  `json:"ip"`
	Email        []string  `json:"email"`
	URI          []string  `json:"uri"`
}

func init() {
	register("csr", func(input json.RawMessage) any {
		var encoded string
		if err := json.Unmarshal(input, &encoded); err != nil {
			return csrAnswer{Error: "input: " + err.Error()}
		}
		raw, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			return csrAnswer{Error: "input: " + err.Error()}
		}
		return readCSR(raw)
	})
}

func readCSR(raw []byte) csrAnswer {
	answer := csrAnswer{Organization: []string{}, Names: []csrName{}, DNS: []string{}, IP: []string{},
		Email: []string{}, URI: []string{}}
	block, rest := pem.Decode(raw)
	for next, more := block, rest; next != nil; next, more = pem.Decode(more) {
		answer.PemBlocks++
	}
	// As ParseCSR: only the first block counts, whatever surrounds it.
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		answer.PemFound = block != nil
		if block != nil {
			answer.PemType = block.Type
		}
		answer.Error = "PEM block type must be CERTIFICATE REQUEST"
		return answer
	}
	answer.PemFound, answer.PemType = true, block.Type
	answer.PemRestEmpty = len(bytes.TrimSpace(rest)) == 0
	answer.PemHeaders = len(block.Headers)
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		answer.Error = err.Error()
		return answer
	}
	answer.OK = true
	answer.SignatureOK = csr.CheckSignature() == nil
	answer.CommonName = csr.Subject.CommonName
	answer.Organization = append(answer.Organization, csr.Subject.Organization...)
	for _, atv := range csr.Subject.Names {
		name := csrName{Type: atv.Type.String()}
		if text, ok := atv.Value.(string); ok {
			name.Value = &text
		} else if atv.Value == nil {
			name.Kind = "nil"
		} else {
			name.Kind = fmt.Sprintf("%T", atv.Value)
		}
		answer.Names = append(answer.Names, name)
	}
	answer.DNS = append(answer.DNS, csr.DNSNames...)
	for _, ip := range csr.IPAddresses {
		answer.IP = append(answer.IP, ip.String())
	}
	answer.Email = append(answer.Email, csr.EmailAddresses...)
	for _, uri := range csr.URIs {
		answer.URI = append(answer.URI, uri.String())
	}
	return answer
}
