package k8s

import (
	"github.com/faas-gpu/faas-gpu/internal/testutil"

	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cluster is a real control plane on 127.0.0.1 built by
// hack/k8s-testenv.sh: etcd, kube-apiserver, kube-controller-manager (so
// Deployments make pods), kube-scheduler (so pods are bound and
// nvidia.com/gpu is counted) and kwok (fake kubelets: nodes Ready, pods
// Running and Ready).
type cluster struct {
	bin, dir   string
	kubeconfig string
	apiURL     string
	token      string
	procs      []component
	logs       []string
}

func freePort() (int, error) { return testutil.FreePort() }

func startCluster(bin, dir string) (*cluster, error) {
	c := &cluster{bin: bin, dir: dir}
	ports := make([]int, 4)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	etcdPort, peerPort, apiPort, kubeletPort := ports[0], ports[1], ports[2], ports[3]
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	c.token = hex.EncodeToString(tok[:])
	c.apiURL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	saKey, saPub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := writeServiceAccountKeys(saKey, saPub); err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.token+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
`, c.apiURL, c.token)
	if err := os.WriteFile(c.kubeconfig, []byte(kc), 0o600); err != nil {
		return nil, err
	}
	certs := filepath.Join(dir, "certs")

	if err := c.start("etcd", "--data-dir", filepath.Join(dir, "etcd"), "--name", "local",
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("local=http://127.0.0.1:%d", peerPort), "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return c, err
	}
	if err := c.start("kube-apiserver", "--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(apiPort),
		// on loopback the apiserver cannot reconcile its own endpoints
		"--endpoint-reconciler-type", "none", "--cert-dir", certs,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", "10.96.0.0/16", "--token-auth-file", tokens,
		"--authorization-mode", "RBAC", "--allow-privileged=true",
		// kwok's nodes have no resolvable host names: logs go to their IP
		"--kubelet-preferred-address-types", "InternalIP"); err != nil {
		return c, err
	}
	if err := c.waitReady(90 * time.Second); err != nil {
		return c, err
	}
	if err := c.start("kube-controller-manager", "--kubeconfig", c.kubeconfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "0", "--use-service-account-credentials=false",
		"--service-account-private-key-file", saKey, "--root-ca-file", filepath.Join(certs, "apiserver.crt"),
		// no pod CIDRs on loopback; no serving-cert bundle publisher without a signer
		"--controllers", "*,-node-ipam-controller,-kube-apiserver-serving-clustertrustbundle-publisher-controller",
		"--concurrent-deployment-syncs", "10", "--concurrent-replicaset-syncs", "10"); err != nil {
		return c, err
	}
	if err := c.start("kube-scheduler", "--kubeconfig", c.kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", "0"); err != nil {
		return c, err
	}
	kwokConfig, err := writeKwokConfig(bin, dir)
	if err != nil {
		return c, err
	}
	// kwok manages only the nodes annotated kwok.x-k8s.io/node=fake. Pods get
	// loopback IPs, so a test can stand in for a pod's watchdog; the nodes'
	// kubelet API (logs) is kwok's server on 127.0.0.1.
	if err := c.start("kwok", "--kubeconfig", c.kubeconfig, "-c", kwokConfig,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--manage-nodes-with-label-selector=", "--cidr=127.10.0.0/16", "--node-lease-duration-seconds=40",
		"--node-ip=127.0.0.1", "--node-port", strconv.Itoa(kubeletPort), "--server-address", fmt.Sprintf("127.0.0.1:%d", kubeletPort)); err != nil {
		return c, err
	}
	return c, nil
}

type component struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs one component; its output goes to a file kept for failures.
func (c *cluster) start(name string, args ...string) error {
	logPath := filepath.Join(c.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The kernel kills the component if the test binary dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	c.procs = append(c.procs, component{cmd: cmd, done: done})
	c.logs = append(c.logs, logPath)
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	return nil
}

func (c *cluster) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.apiURL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %v:\n%s", timeout, c.tail("kube-apiserver", 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tail is the end of a component's log.
func (c *cluster) tail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// stop terminates the components, newest first.
func (c *cluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// functionLog is what every function container "prints", in the CRI log
// format kwok serves it from.
var functionLog = []string{"model loaded in 1.2s", "serving on :8080"}

// writeKwokConfig is the script's stages plus logs for function pods.
func writeKwokConfig(bin, dir string) (string, error) {
	stages, err := os.ReadFile(filepath.Join(bin, "kwok-stages.yaml"))
	if err != nil {
		return "", err
	}
	logFile := filepath.Join(dir, "function.log")
	var lines strings.Builder
	for i, l := range functionLog {
		fmt.Fprintf(&lines, "2026-01-02T03:04:0%d.000000000Z stdout F %s\n", i, l)
	}
	if err := os.WriteFile(logFile, []byte(lines.String()), 0o644); err != nil {
		return "", err
	}
	logs := fmt.Sprintf(`
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: function-logs
spec:
  selector:
    matchNamespaces: [%s]
  logs:
  - logsFile: %s
    follow: false
`, "openfaas-fn", logFile)
	path := filepath.Join(dir, "kwok.yaml")
	return path, os.WriteFile(path, append(stages, []byte(logs)...), 0o644)
}

func writeServiceAccountKeys(keyPath, pubPath string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// describe lists the component logs' locations, for a failure message.
func (c *cluster) describe() string {
	return "component logs: " + strings.Join(c.logs, " ")
}
