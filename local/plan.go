package local

// A load from the node tier (the model file in host memory or on local
// disk) skips the download and storage read of a cold load but still pays
// deserialising and the copy to the GPU; 40 % of the cold time is our
// assumption until measured (docs/scheduling.md).
const defaultNodeLoadFactor = 0.4

// defaultModelBytes sizes a model no profile describes, for the cache.
const defaultModelBytes = 256 << 20
