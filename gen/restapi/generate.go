// Package restapi is generated from openapi.yaml by oapi-codegen; never edit
// restapi.gen.go by hand, run `make generate`.
package restapi
