package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/profiles/profiler"
	"github.com/openfaas/faas-provider/auth"
)

const profileUsage = `Usage: faas-gpu profile --function NAME --out FILE [flags]

Measures a deployed function at each SM % (and batch): deploys a temporary
copy NAME-profile-SM through the provider's API, waits until it is ready,
drives load against it, removes it, and writes a profile file that
"faas-gpu serve -profiles DIR" loads. See docs/profiling.md.

Credentials: --username/--password, else $OPENFAAS_USER/$OPENFAAS_PASSWORD,
else the basic-auth-user and basic-auth-password files of --secret-mount-path.

Flags:
`

// profileOptions are the flags of `faas-gpu profile`.
type profileOptions struct {
	run          profiler.Options
	gateway      string
	sm, batch    string
	out          string
	user, pass   string
	secretDir    string
	bodyFile     string
	progressTick time.Duration
}

func profileFlags(stderr io.Writer) (*flag.FlagSet, *profileOptions) {
	o := &profileOptions{}
	gateway := os.Getenv("OPENFAAS_URL")
	if gateway == "" {
		gateway = "http://127.0.0.1:8080"
	}
	fs := flag.NewFlagSet("profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.run.Function, "function", "", "deployed function to profile (required)")
	fs.StringVar(&o.gateway, "gateway", gateway, "OpenFaaS gateway or faas-gpu provider URL (default $OPENFAAS_URL, else http://127.0.0.1:8080)")
	fs.StringVar(&o.run.Namespace, "namespace", "", "the function's namespace (default: the provider's)")
	fs.StringVar(&o.sm, "sm", "10,25,50,100", "SM percentages to measure, comma-separated, each 1-100")
	fs.StringVar(&o.batch, "batch", "1", "batch sizes to measure, comma-separated; each copy gets FAAS_GPU_BATCH=N")
	fs.DurationVar(&o.run.Duration, "duration", 10*time.Second, "how long each phase of each slice records")
	fs.DurationVar(&o.run.Warmup, "warmup", 2*time.Second, "unrecorded load before each slice's first phase")
	fs.IntVar(&o.run.Concurrency, "concurrency", 4, "requests in flight in the load phase (throughput); the latency phase keeps one batch in flight")
	fs.StringVar(&o.run.Model, "model", "", "model name of the profile (default: the function's com.openfaas.gpu.model, else its name)")
	fs.StringVar(&o.run.GPU, "gpu", "", "GPU product to write (default: where the copies ran, from /system/gpus; needed through an OpenFaaS gateway)")
	fs.StringVar(&o.out, "out", "", "profile file to write, e.g. profiles/mymodel.yaml (required)")
	fs.StringVar(&o.user, "username", "", "basic-auth user (default $OPENFAAS_USER)")
	fs.StringVar(&o.pass, "password", "", "basic-auth password (default $OPENFAAS_PASSWORD; prefer the variable: flags show in ps)")
	fs.StringVar(&o.secretDir, "secret-mount-path", os.Getenv("secret_mount_path"), "folder with basic-auth-user and basic-auth-password, as the provider reads them (default $secret_mount_path)")
	fs.StringVar(&o.bodyFile, "body", "", "file whose content is each request's body (default: empty)")
	fs.StringVar(&o.run.ContentType, "content-type", "", "Content-Type of each request")
	fs.DurationVar(&o.run.ReadyTimeout, "ready-timeout", 2*time.Minute, "how long a copy may take to be ready, or to go once deleted")
	fs.DurationVar(&o.progressTick, "progress-interval", time.Second, "how often progress is printed while measuring")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), profileUsage)
		fs.PrintDefaults()
	}
	return fs, o
}

// profileCmd is `faas-gpu profile`. Ctrl-C (or SIGTERM) stops the run and
// removes the temporary functions; a second Ctrl-C quits at once.
func profileCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-ctx.Done():
			select {
			case <-done: // stop() on the way out, not a signal
				return
			default:
			}
			stop() // the next signal gets its default action
			fmt.Fprintln(stderr, "faas-gpu profile: interrupted: removing temporary functions (Ctrl-C again to quit at once)")
		}
	}()
	return runProfile(ctx, args, stdout, stderr)
}

// runProfile is profileCmd under a context the caller controls.
func runProfile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, o := profileFlags(stderr)
	if help, err := parseArgs(fs, args, ""); help || err != nil {
		return err
	}
	if err := o.complete(fs); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	user, pass, err := profileCredentials(o)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	client, err := profiler.NewClient(o.gateway, user, pass, o.run.Concurrency)
	if err != nil {
		return fmt.Errorf("profile: --gateway: %w", err)
	}
	defer client.Close()
	o.run.Progress, o.run.ProgressEvery = stderr, o.progressTick

	res, err := profiler.Run(ctx, client, o.run)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("profile: interrupted: %w", err)
		}
		return fmt.Errorf("profile: %w", err)
	}
	p, err := res.Profile()
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if err := writeProfile(o.out, p); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	printSummary(stdout, res)
	fmt.Fprintf(stdout, "wrote %s: model %s on %s, %d points; load it with faas-gpu serve -profiles %s\n",
		o.out, p.Model, p.GPU, len(p.Points), filepath.Dir(o.out))
	return nil
}

// complete checks what can be checked before any request: a mistake found
// after minutes of measuring would waste them.
func (o *profileOptions) complete(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.run.Function == "" {
		return fmt.Errorf("--function is required")
	}
	if o.out == "" {
		return fmt.Errorf("--out is required")
	}
	if fi, err := os.Stat(filepath.Dir(o.out)); err != nil || !fi.IsDir() {
		return fmt.Errorf("--out: folder %s does not exist", filepath.Dir(o.out))
	}
	var err error
	if o.run.SMs, err = parseInts("--sm", o.sm); err != nil {
		return err
	}
	if o.run.Batches, err = parseInts("--batch", o.batch); err != nil {
		return err
	}
	if o.bodyFile != "" {
		if o.run.Body, err = os.ReadFile(o.bodyFile); err != nil {
			return fmt.Errorf("--body: %w", err)
		}
	}
	if o.progressTick <= 0 {
		return fmt.Errorf("--progress-interval: %s must be positive", o.progressTick)
	}
	// The rest (ranges, durations) is profiler.Options' to check; its
	// errors start with the flag's name.
	if err := o.run.Check(); err != nil {
		return fmt.Errorf("--%w", err)
	}
	return nil
}

func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a comma-separated list of integers", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// profileCredentials picks basic-auth credentials: flags, then the
// variables faas-cli users have set, then the provider's secret folder.
func profileCredentials(o *profileOptions) (user, pass string, err error) {
	user, pass = o.user, o.pass
	if user == "" {
		user = os.Getenv("OPENFAAS_USER")
	}
	if pass == "" {
		pass = os.Getenv("OPENFAAS_PASSWORD")
	}
	if user == "" && pass == "" && o.secretDir != "" {
		c, err := (&auth.ReadBasicAuthFromDisk{SecretMountPath: o.secretDir}).Read()
		if err != nil {
			return "", "", fmt.Errorf("--secret-mount-path: %w", err)
		}
		return c.User, c.Password, nil
	}
	if pass != "" && user == "" {
		user = "admin" // OpenFaaS's default user, as faas-cli assumes
	}
	if user != "" && pass == "" {
		return "", "", fmt.Errorf("user %q has no password: give --password or $OPENFAAS_PASSWORD", user)
	}
	return user, pass, nil
}

// writeProfile writes p to path through a temporary file, so a failed or
// interrupted write never leaves half a profile for serve to trip on.
func writeProfile(path string, p profiles.Profile) error {
	data, err := profiles.Marshal(p)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".profile-*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// printSummary is the measurements as a table: what the profile keeps (p50
// with one batch in flight) beside what it does not (tails, load).
func printSummary(w io.Writer, res profiler.Result) {
	fmt.Fprintf(w, "%s (model %s) on %s, %s per phase:\n", res.Function, res.Model, res.GPU, res.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sm %\tbatch\tp50 ms\tp90 ms\tp99 ms\t|\tin flight\treq/s\tp50 ms\tp99 ms\tfailed\t")
	for _, m := range res.Points {
		failed := m.Latency.Errors
		if m.Load != m.Latency { // one phase served as both
			failed += m.Load.Errors
		}
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%.2f\t|\t%d\t%.1f\t%.2f\t%.2f\t%d\t\n", m.SM, m.Batch,
			ms(m.Latency.P50), ms(m.Latency.P90), ms(m.Latency.P99),
			m.Load.InFlight, m.Load.Throughput, ms(m.Load.P50), ms(m.Load.P99), failed)
	}
	tw.Flush()
	fmt.Fprintln(w, "(left: one batch in flight, its p50 is the profile's latency; right: the load phase)")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
