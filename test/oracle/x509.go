// x509: the serving certificate src/cli/selfsigned.ts writes, read as a Go scraper (Prometheus, kubectl, the API
// server's clients) reads it: crypto/x509's parser, its signature check, and verification with the certificate
// itself as the only root (a scrape config's ca_file), for a DNS name and an IP.
package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"time"
)

type x509Input struct {
	Pem    string `json:"pem"`
	Host   string `json:"host"`
	AtUnix int64  `json:"atUnix"`
}

type x509Answer struct {
	Error          string   `json:"error,omitempty"`
	Version        int      `json:"version,omitempty"`
	Algorithm      string   `json:"algorithm,omitempty"`
	Subject        string   `json:"subject,omitempty"`
	Issuer         string   `json:"issuer,omitempty"`
	DNSNames       []string `json:"dnsNames"`
	IPs            []string `json:"ips"`
	NotBefore      string   `json:"notBefore,omitempty"`
	NotAfter       string   `json:"notAfter,omitempty"`
	IsCA           bool     `json:"isCA"`
	ServerAuth     bool     `json:"serverAuth"`
	SignatureError string   `json:"signatureError"`
	VerifyError    string   `json:"verifyError"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func init() {
	register("x509", func(raw json.RawMessage) any {
		var input x509Input
		if err := json.Unmarshal(raw, &input); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		block, _ := pem.Decode([]byte(input.Pem))
		if block == nil || block.Type != "CERTIFICATE" {
			return x509Answer{Error: "no CERTIFICATE PEM block"}
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return x509Answer{Error: err.Error()}
		}
		ips := []string{}
		for _, ip := range cert.IPAddresses {
			ips = append(ips, ip.String())
		}
		serverAuth := false
		for _, usage := range cert.ExtKeyUsage {
			serverAuth = serverAuth || usage == x509.ExtKeyUsageServerAuth
		}
		roots := x509.NewCertPool()
		roots.AddCert(cert)
		_, verifyErr := cert.Verify(x509.VerifyOptions{
			Roots:       roots,
			DNSName:     input.Host,
			CurrentTime: time.Unix(input.AtUnix, 0),
		})
		return x509Answer{
			Version:        cert.Version,
			Algorithm:      cert.SignatureAlgorithm.String(),
			Subject:        cert.Subject.String(),
			Issuer:         cert.Issuer.String(),
			DNSNames:       append([]string{}, cert.DNSNames...),
			IPs:            ips,
			NotBefore:      cert.NotBefore.UTC().Format(time.RFC3339),
			NotAfter:       cert.NotAfter.UTC().Format(time.RFC3339),
			IsCA:           cert.IsCA,
			ServerAuth:     serverAuth,
			SignatureError: errText(cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature)),
			VerifyError:    errText(verifyErr),
		}
	})
}
