package sim

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceHeader is the first line of a trace file. Each following line is
// one request: its arrival time in seconds since the start of the trace
// (a decimal number, lines in non-decreasing time order), the function it
// invokes and the model it needs (a profile name; for a one-model function
// that function's model, for a multi-model function the X-Model header).
const TraceHeader = "time,function,model"

var (
	functionName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	modelName    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// TraceOptions are what a trace cannot say about its functions: every
// function of the trace gets them.
type TraceOptions struct {
	Name        string
	SLO         time.Duration
	SMPercent   int
	MemoryBytes int64
	Min, Max    int
	// Duration of the offered load; 0: the last arrival rounded up to a
	// whole second.
	Duration time.Duration
}

// ReadTrace parses a trace (see TraceHeader). A function whose requests
// all name one model is a one-model function of that model; one whose
// requests name several serves them all (X-Model) and is sized by its most
// requested one. Functions and models are ordered by name. Errors name the
// line.
func ReadTrace(r io.Reader, opts TraceOptions) (*Workload, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = 3
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("line 1: empty trace, want header %s", TraceHeader)
	}
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if strings.Join(head, ",") != TraceHeader {
		return nil, fmt.Errorf("line 1: header %q, want %s", strings.Join(head, ","), TraceHeader)
	}
	w := &Workload{Name: opts.Name}
	fnIndex, modelIndex := map[string]int32{}, map[string]int32{}
	var counts []map[int32]int // per function: model -> requests
	var last time.Duration
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err) // *csv.ParseError names the line
		}
		line, _ := cr.FieldPos(0)
		at, err := parseSeconds(rec[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: time: %w", line, err)
		}
		if at < last {
			return nil, fmt.Errorf("line %d: time %s is before the previous line's %s: sort the trace by time", line, rec[0], fmtSeconds(last))
		}
		last = at
		fn, model := strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2])
		if !functionName.MatchString(fn) {
			return nil, fmt.Errorf("line %d: function: %q must be lower-case letters, digits and '-', at most 63", line, fn)
		}
		if !modelName.MatchString(model) {
			return nil, fmt.Errorf("line %d: model: %q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", line, model)
		}
		fi, ok := fnIndex[fn]
		if !ok {
			fi = int32(len(w.Functions))
			fnIndex[fn] = fi
			w.Functions = append(w.Functions, Function{Name: fn})
			counts = append(counts, map[int32]int{})
		}
		mi, ok := modelIndex[model]
		if !ok {
			mi = int32(len(w.Models))
			modelIndex[model] = mi
			w.Models = append(w.Models, model)
		}
		counts[fi][mi]++
		w.Arrivals = append(w.Arrivals, Arrival{At: at, Fn: fi, Model: mi})
	}
	if len(w.Arrivals) == 0 {
		return nil, errors.New("trace: no requests after the header")
	}
	for i := range w.Functions {
		f := &w.Functions[i]
		ms := make([]int32, 0, len(counts[i]))
		for m := range counts[i] {
			ms = append(ms, m)
		}
		slices.SortFunc(ms, func(a, b int32) int {
			if counts[i][a] != counts[i][b] {
				return counts[i][b] - counts[i][a]
			}
			return strings.Compare(w.Models[a], w.Models[b])
		})
		f.Model = w.Models[ms[0]]
		if len(ms) > 1 {
			for _, m := range ms {
				f.Models = append(f.Models, w.Models[m])
			}
		}
		f.SLO, f.SMPercent, f.MemoryBytes, f.Min, f.Max = opts.SLO, opts.SMPercent, opts.MemoryBytes, opts.Min, opts.Max
	}
	w.Duration = opts.Duration
	if w.Duration <= 0 {
		w.Duration = max(time.Second, last.Truncate(time.Second)+time.Second)
	}
	w.canonicalize()
	return w, w.Validate()
}

func parseSeconds(s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e9 {
		return 0, fmt.Errorf("%q is not a number of seconds ≥ 0", s)
	}
	return time.Duration(math.Round(v * float64(time.Second))), nil
}

func fmtSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// WriteTrace writes w's requests in the trace format, times to the
// microsecond.
func WriteTrace(out io.Writer, w *Workload) error {
	bw := bufio.NewWriter(out)
	bw.WriteString(TraceHeader + "\n")
	buf := make([]byte, 0, 64)
	for _, a := range w.Arrivals {
		buf = strconv.AppendFloat(buf[:0], float64(a.At.Microseconds())/1e6, 'f', 6, 64)
		buf = append(buf, ',')
		buf = append(buf, w.Functions[a.Fn].Name...)
		buf = append(buf, ',')
		buf = append(buf, w.Models[a.Model]...)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}
