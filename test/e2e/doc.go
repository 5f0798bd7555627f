// Package e2e holds faas-gpu's end-to-end tests: the provider runs as a
// real process (`faas-gpu serve`), is driven with openfaas/go-sdk's client
// (what faas-cli uses) directly and through the real OpenFaaS gateway, and
// is killed and restarted on its state directory.
//
// TestMain builds the faas-gpu binary, the test function
// local/testdata/httpfn and the gateway (hack/build-gateway.sh, from the Go
// module proxy into a cache outside the checkout). The gateway listens on
// the fixed ports 8080 and 8082, so only one gateway test can run at a time
// on a machine; it fails with a clear message when they are taken.
package e2e
