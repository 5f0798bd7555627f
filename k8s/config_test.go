package k8s

import (
	"flag"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// -k8s-image-pull-policy takes Kubernetes' three policies as written and
// fails at start on anything else, naming the flag.
func TestImagePullPolicyFlag(t *testing.T) {
	tests := []struct {
		args    []string
		want    corev1.PullPolicy
		wantErr bool
	}{
		{nil, "", false}, // Kubernetes' own default
		{[]string{"-k8s-image-pull-policy", "IfNotPresent"}, "IfNotPresent", false},
		{[]string{"-k8s-image-pull-policy", "Always"}, "Always", false},
		{[]string{"-k8s-image-pull-policy", "Never"}, "Never", false},
		{[]string{"-k8s-image-pull-policy", "ifnotpresent"}, "", true},
		{[]string{"-k8s-image-pull-policy", ""}, "", true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o := AddFlags(fs)
			err := fs.Parse(tt.args)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "-k8s-image-pull-policy") {
					t.Fatalf("err = %v, want one naming -k8s-image-pull-policy", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.ImagePullPolicy != tt.want {
				t.Fatalf("ImagePullPolicy = %q, want %q", o.ImagePullPolicy, tt.want)
			}
		})
	}
}

// -k8s-parked-sees takes held or all, and says what else it got.
func TestParkedSeesFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
		err  bool
	}{
		{nil, ParkedSeesHeld, false},
		{[]string{"-k8s-parked-sees", "all"}, ParkedSeesAll, false},
		{[]string{"-k8s-parked-sees", "held"}, ParkedSeesHeld, false},
		{[]string{"-k8s-parked-sees", "some"}, "", true},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o := AddFlags(fs)
		err := fs.Parse(tt.args)
		if (err != nil) != tt.err || err == nil && o.ParkedSees != tt.want {
			t.Errorf("%v: ParkedSees %q, err %v; want %q, error %v", tt.args, o.ParkedSees, err, tt.want, tt.err)
		}
	}
}
