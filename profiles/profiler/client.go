package profiler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/openfaas/faas-provider/types"
	sdk "github.com/openfaas/go-sdk"
)

// Client is API over HTTP against an OpenFaaS gateway or the faas-gpu
// provider itself: go-sdk for deploy and delete, plain requests where
// go-sdk hides the status code the profiler needs (a function's status,
// /system/gpus) or adds what a load test must not pay (invocations).
type Client struct {
	base   *url.URL
	auth   *sdk.BasicAuth // nil: no credentials
	sdk    *sdk.Client
	mgmt   *http.Client // management calls, bounded
	invoke *http.Client // invocations: the caller's context bounds them
}

// NewClient checks gateway (http or https, with a host) and returns a
// client that sends user and password as basic auth when user is set.
// maxConns is how many invocations may be in flight at once, so that each
// keeps its connection.
func NewClient(gateway, user, password string, maxConns int) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(gateway, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gateway %q is not an http(s)://host[:port] URL", gateway)
	}
	c := &Client{base: u}
	if user != "" {
		c.auth = &sdk.BasicAuth{Username: user, Password: password}
	}
	c.mgmt = &http.Client{Timeout: 30 * time.Second}
	var auth sdk.ClientAuth
	if c.auth != nil {
		auth = c.auth
	}
	c.sdk = sdk.NewClient(u, auth, c.mgmt)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(maxConns, 2)
	c.invoke = &http.Client{Transport: tr}
	return c, nil
}

// Close drops idle connections.
func (c *Client) Close() {
	c.mgmt.CloseIdleConnections()
	c.invoke.CloseIdleConnections()
}

func (c *Client) url(path string, query url.Values) string {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	return u.String()
}

// get sends an authenticated GET and returns the body of a 200 answer.
func (c *Client) get(ctx context.Context, path string, query url.Values) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path, query), nil)
	if err != nil {
		return nil, err
	}
	if c.auth != nil {
		_ = c.auth.Set(req) // never fails
	}
	resp, err := c.mgmt.Do(req)
	if err != nil {
		return nil, c.unreachable(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp.StatusCode, body)
	}
	return body, nil
}

// unreachable names the gateway when a request could not be sent, the
// commonest mistake being a wrong --gateway.
func (c *Client) unreachable(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("cannot reach the gateway at %s (set --gateway or $OPENFAAS_URL): %w", c.base, err)
}

func statusError(code int, body []byte) error {
	msg := strings.TrimSpace(string(body))
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	switch code {
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusNotFound:
		return fmt.Errorf("%s: %w", msg, ErrNotFound)
	case http.StatusConflict:
		return fmt.Errorf("%s: %w", msg, ErrExists)
	}
	return &StatusError{Code: code, Body: msg}
}

// Function implements API.
func (c *Client) Function(ctx context.Context, name, namespace string) (types.FunctionStatus, error) {
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	body, err := c.get(ctx, "/system/function/"+url.PathEscape(name), q)
	if errors.Is(err, ErrNotFound) {
		return types.FunctionStatus{}, fmt.Errorf("function %s%s: %w", name, inNamespace(namespace), ErrNotFound)
	}
	if err != nil {
		return types.FunctionStatus{}, fmt.Errorf("function %s: %w", name, err)
	}
	var st types.FunctionStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return types.FunctionStatus{}, fmt.Errorf("function %s: decode status: %w", name, err)
	}
	return st, nil
}

func inNamespace(ns string) string {
	if ns == "" {
		return ""
	}
	return " in namespace " + ns
}

// Deploy implements API.
func (c *Client) Deploy(ctx context.Context, dep types.FunctionDeployment) error {
	code, err := c.sdk.Deploy(ctx, dep)
	switch {
	case err == nil:
		return nil
	case code == http.StatusConflict:
		return fmt.Errorf("deploy %s: %w", dep.Service, ErrExists)
	case code == http.StatusUnauthorized:
		return fmt.Errorf("deploy %s: %w", dep.Service, ErrUnauthorized)
	case code == http.StatusBadGateway && ctx.Err() == nil:
		// go-sdk answers 502 when the request could not be sent at all.
		return fmt.Errorf("deploy %s: %w", dep.Service, c.unreachable(err))
	}
	return fmt.Errorf("deploy %s: %w", dep.Service, err)
}

// Delete implements API. go-sdk reports "not found" only in words, so a
// failed delete is confirmed with a status request.
func (c *Client) Delete(ctx context.Context, name, namespace string) error {
	err := c.sdk.DeleteFunction(ctx, name, namespace)
	if err == nil {
		return nil
	}
	if _, gerr := c.Function(ctx, name, namespace); errors.Is(gerr, ErrNotFound) {
		return gerr
	}
	return fmt.Errorf("delete %s: %w", name, err)
}

// GPUs implements API.
func (c *Client) GPUs(ctx context.Context) (GPUReport, error) {
	body, err := c.get(ctx, "/system/gpus", nil)
	if errors.Is(err, ErrNotFound) {
		return GPUReport{}, fmt.Errorf("%s/system/gpus answered 404: %w", c.base, ErrNoGPUReport)
	}
	if err != nil {
		return GPUReport{}, fmt.Errorf("/system/gpus: %w", err)
	}
	var r GPUReport
	if err := json.Unmarshal(body, &r); err != nil {
		return GPUReport{}, fmt.Errorf("/system/gpus: decode: %w", err)
	}
	return r, nil
}

// Invoke implements API. It sends no credentials: /function/ is open on
// the gateway and the provider, and the header would reach the function.
func (c *Client) Invoke(ctx context.Context, name, namespace string, body []byte, contentType string) error {
	target := name
	if namespace != "" {
		target += "." + namespace
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/function/"+url.PathEscape(target), nil), bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.invoke.Do(req)
	if err != nil {
		return c.unreachable(err)
	}
	defer resp.Body.Close()
	// The whole answer: a function's latency ends with its last byte.
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return fmt.Errorf("read answer: %w", err)
		}
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return statusError(resp.StatusCode, msg)
}
