// Package profiles holds what faas-gpu knows about a model's speed on a GPU
// slice: profile files measured at a grid of (batch, SM %, time quota),
// lookup by (model, GPU product), interpolation between measured SM
// points, the measured curves, and import of measured tables such as the
// RaPP V100 data. It gives data only: which slice a function gets is
// decided in package scheduler (Choose, PlanFunction).
//
// The package is pure: no clock, no network, no package-level mutable
// state. Time (an SLO) and data (a Store) come in as arguments, so the
// provider and the simulator run the same code. The file format and the
// built-in profiles are documented in docs/profiles.md.
package profiles
