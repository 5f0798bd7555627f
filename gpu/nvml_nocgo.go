//go:build !cgo

package gpu

import "fmt"

// NVML stands in for the NVML discoverer in builds without cgo: go-nvml
// loads the driver's library with dlopen, which needs cgo. Such a binary
// always falls back (serve) or explains (agent).
type NVML struct{ libPath string }

// NewNVML returns a discoverer that always fails with ErrNoDiscovery.
func NewNVML(_, libraryPath string) *NVML { return &NVML{libPath: libraryPath} }

var _ Discoverer = (*NVML)(nil)

// Discover fails with ErrNoDiscovery.
func (d *NVML) Discover() (Inventory, error) {
	_, err := d.NodeGPUs()
	return Inventory{}, err
}

// NodeGPUs fails with ErrNoDiscovery.
func (d *NVML) NodeGPUs() (NodeGPUs, error) {
	return NodeGPUs{}, fmt.Errorf("%w: cannot load the NVML library: this faas-gpu was built without cgo (build with CGO_ENABLED=1)", ErrNoDiscovery)
}
