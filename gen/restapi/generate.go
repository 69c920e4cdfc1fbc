// Package restapi is generated from openapi.yaml by oapi-codegen; never edit
// it by hand, run `make generate` (which also copies openapi.yaml here).
package restapi

import _ "embed"

// Spec is the published contract, byte for byte, served at GET /openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
