package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
)

// ContentionHeader is the first line of a contention file.
const ContentionHeader = "model,penalty"

// DefaultPenalty is the built-in interference penalty of a model the file
// does not list. Calibrated on FaST-GShare's slide 17 (docs/evaluation.md,
// "Calibration on slide 17"): with it, nine RNNT-stand-in (resnet152)
// replicas in 12 % and 24 % partitions serve ×2.29 and ×2.02 what nine
// racing ones do, where the slide reads ×2.09 and ×2.27 (TestSlide17Calibration).
const DefaultPenalty = 0.25

// Contention is how replicas that are busy at the same time slow each
// other (docs/evaluation.md, "Contention"):
//
//   - GPU time: a busy replica occupies, on average, its SM share times
//     the GPU part of its batch (profiles.Split) over the batch's latency.
//     While the busy replicas of a GPU occupy more than the whole GPU, their
//     GPU parts stretch so that they occupy exactly the whole GPU (MPS SM
//     caps that add up to more than 100 %, CUDA time slices).
//   - Interference: co-located busy clients share memory bandwidth and L2.
//     A batch of model m runs 1 + Penalty(m) × Σ (neighbour's SM share)
//     times longer, summed over the other busy replicas of its GPU (a
//     share of the whole GPU is 1). An idle neighbour costs nothing.
//   - Host CPU: each busy replica's host part keeps a core busy (below
//     full quota, the wait for its time slices does not); when the busy
//     replicas of a node need more cores than it has (gpu.Node.Cores),
//     host parts stretch in proportion.
//
// A nil *Contention is none: the simulator before this model, where
// slices never touch and time sharing is k busy pods at 1/k speed.
type Contention struct {
	// Default is the penalty of a model Penalties does not list.
	Default float64
	// Penalties are per model.
	Penalties map[string]float64
	// Source says where the values came from.
	Source string
}

// DefaultContention is the built-in model: every model at DefaultPenalty.
func DefaultContention() *Contention {
	return &Contention{Default: DefaultPenalty, Source: "built-in (slide-17 calibration)"}
}

// Penalty is model's interference penalty.
func (c *Contention) Penalty(model string) float64 {
	if v, ok := c.Penalties[model]; ok {
		return v
	}
	return c.Default
}

// ParseContention reads a contention file: CSV with the header
// ContentionHeader, one model a line, "*" for every model not listed
// (default DefaultPenalty); '#' starts a comment line. hack/gpu-check.sh
// writes one from its co-location experiment. Errors name the line.
func ParseContention(r io.Reader, name string) (*Contention, error) {
	c := &Contention{Default: DefaultPenalty, Penalties: map[string]float64{}, Source: name}
	sc := bufio.NewScanner(r)
	line, header, defaultGiven := 0, false, false
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if !header {
			if text != ContentionHeader {
				return nil, fmt.Errorf("%s:%d: header %q, want %q", name, line, text, ContentionHeader)
			}
			header = true
			continue
		}
		model, val, ok := strings.Cut(text, ",")
		model = strings.TrimSpace(model)
		if !ok || model == "" {
			return nil, fmt.Errorf("%s:%d: want model,penalty, got %q", name, line, text)
		}
		if model != "*" && !modelName.MatchString(model) {
			return nil, fmt.Errorf("%s:%d: model %q is not a profile name", name, line, model)
		}
		p, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(p) || math.IsInf(p, 0) || p < 0 {
			return nil, fmt.Errorf("%s:%d: penalty %q must be a number at least 0", name, line, strings.TrimSpace(val))
		}
		if _, dup := c.Penalties[model]; dup || model == "*" && defaultGiven {
			return nil, fmt.Errorf("%s:%d: model %q listed twice", name, line, model)
		}
		if model == "*" {
			c.Default, defaultGiven = p, true
			continue
		}
		c.Penalties[model] = p
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !header {
		return nil, fmt.Errorf("%s: empty: want the header %q", name, ContentionHeader)
	}
	return c, nil
}

// LoadContention reads a contention file; "builtin" is DefaultContention
// and "off" none (nil).
func LoadContention(path string) (*Contention, error) {
	switch path {
	case "builtin":
		return DefaultContention(), nil
	case "off":
		return nil, nil
	case "":
		return nil, errors.New("contention: empty path (give a file, builtin or off)")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("contention: %w", err)
	}
	defer f.Close()
	c, err := ParseContention(f, path)
	if err != nil {
		return nil, fmt.Errorf("contention: %w", err)
	}
	return c, nil
}
