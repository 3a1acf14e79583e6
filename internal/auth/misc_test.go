package auth

import (
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
)

func x509Parse(der []byte) (*ecdsa.PrivateKey, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	e, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not ECDSA")
	}
	return e, nil
}
