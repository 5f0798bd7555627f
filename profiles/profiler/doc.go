// Package profiler measures a deployed OpenFaaS function at a grid of GPU
// slice sizes through the provider's own API and turns the measurements
// into a profile (package profiles). It is the engine of `faas-gpu profile`
// (docs/profiling.md).
//
// It lives apart from package profiles because it needs the network and the
// clock, which profiles must not touch: profiles is shared by the provider
// and the simulator, and stays pure.
package profiler
