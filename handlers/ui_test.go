package handlers_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/gorilla/mux"
)

// uiServer routes /ui the way main.go does: a path prefix.
func uiServer(t *testing.T) *httptest.Server {
	t.Helper()
	r := mux.NewRouter()
	r.PathPrefix("/ui").Handler(handlers.MakeUIHandler())
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

func uiGet(t *testing.T, srv *httptest.Server, method, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := *srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// uiPage is the page as served.
func uiPage(t *testing.T) (string, http.Header) {
	t.Helper()
	resp, body := uiGet(t, uiServer(t), http.MethodGet, "/ui/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/ = %d", resp.StatusCode)
	}
	return body, resp.Header
}

func TestUIRoutes(t *testing.T) {
	srv := uiServer(t)
	tests := []struct {
		method, path string
		want         int
		location     string
	}{
		{"GET", "/ui/", 200, ""},
		{"GET", "/ui/?refresh=5", 200, ""},
		{"GET", "/ui/index.html", 200, ""},
		{"HEAD", "/ui/", 200, ""},
		{"GET", "/ui", 301, "ui/"},
		{"GET", "/ui?refresh=5", 301, "ui/?refresh=5"},
		{"GET", "/ui/app.js", 404, ""},
		{"GET", "/uix", 404, ""},
		{"POST", "/ui/", 405, ""},
		{"DELETE", "/ui/", 405, ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			resp, body := uiGet(t, srv, tc.method, tc.path)
			if resp.StatusCode != tc.want {
				t.Fatalf("= %d %q, want %d", resp.StatusCode, body, tc.want)
			}
			if got := resp.Header.Get("Location"); got != tc.location {
				t.Errorf("Location %q, want %q", got, tc.location)
			}
			if tc.want != 200 {
				return
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Cache-Control") != "no-cache" {
				t.Errorf("headers %v", resp.Header)
			}
			if tc.method == "HEAD" && body != "" {
				t.Errorf("HEAD has a body")
			}
			if tc.method == "GET" && !strings.Contains(body, "<title>GPU map · faas-gpu</title>") {
				t.Errorf("not the page: %.200s", body)
			}
		})
	}
}

// TestUIPageIsSelfContained: nothing outside the machine is needed, not
// even a second request to this provider besides /system/gpus.
func TestUIPageIsSelfContained(t *testing.T) {
	page, _ := uiPage(t)
	lower := strings.ToLower(page)
	for _, bad := range []string{"http://", "https://", "<link", "@import", " src=", "<iframe", "<img", "<object", "<embed", "<base"} {
		if i := strings.Index(lower, bad); i >= 0 {
			t.Errorf("page contains %q (external resource?): …%s…", bad, page[max(0, i-60):min(len(page), i+60)])
		}
	}
	if style := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindString(page); strings.Contains(style, "url(") {
		t.Error("the style loads a url(…)")
	}
	// Protocol-relative or absolute URLs in attributes.
	if m := regexp.MustCompile(`(?i)(href|action)\s*=\s*"(//|[a-z]+:)`).FindString(page); m != "" {
		t.Errorf("page links out: %s", m)
	}
	// The one request the script makes.
	fetches := regexp.MustCompile(`new URL\('([^']*)'`).FindAllStringSubmatch(page, -1)
	if len(fetches) != 1 || fetches[0][1] != "../system/gpus" {
		t.Errorf("the page should fetch only ../system/gpus, relative to /ui/: %v", fetches)
	}
}

// TestUIPageParses: the markup is well formed, every element the script
// looks up exists, and the headings give the page an outline.
func TestUIPageParses(t *testing.T) {
	page, _ := uiPage(t)
	markup := regexp.MustCompile(`(?s)<(script|style)>.*?</(script|style)>`).ReplaceAllString(page, "")
	d := xml.NewDecoder(strings.NewReader(markup))
	d.Strict = false
	d.AutoClose = xml.HTMLAutoClose
	d.Entity = xml.HTMLEntity
	ids := map[string]bool{}
	var stack []string
	headings := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the page does not parse: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			stack = append(stack, tok.Name.Local)
			headings[tok.Name.Local]++
			for _, a := range tok.Attr {
				switch {
				case a.Name.Local == "id":
					if ids[a.Value] {
						t.Errorf("id %q twice", a.Value)
					}
					ids[a.Value] = true
				case a.Name.Local == "style":
					t.Errorf("<%s style=…>: the Content-Security-Policy blocks inline style attributes", tok.Name.Local)
				case strings.HasPrefix(a.Name.Local, "on"):
					t.Errorf("<%s %s=…>: the Content-Security-Policy blocks inline handlers", tok.Name.Local, a.Name.Local)
				}
			}
		case xml.EndElement:
			if len(stack) == 0 || stack[len(stack)-1] != tok.Name.Local {
				t.Fatalf("</%s> closes <%s>", tok.Name.Local, strings.Join(stack, "><"))
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) != 0 {
		t.Errorf("unclosed elements: %v", stack)
	}
	if headings["h1"] != 1 || headings["h2"] < 4 {
		t.Errorf("headings: %d h1, %d h2; want one h1 and a h2 per section", headings["h1"], headings["h2"])
	}
	for _, m := range regexp.MustCompile(`getElementById\('([^']+)'\)`).FindAllStringSubmatch(page, -1) {
		if !ids[m[1]] {
			t.Errorf("the script looks up #%s, which the page lacks", m[1])
		}
	}
	for _, id := range []string{"status", "error", "totals", "legend", "nodes", "pending", "functions"} {
		if !ids[id] {
			t.Errorf("no #%s", id)
		}
	}
	if !strings.Contains(page, `<html lang="en">`) || !strings.Contains(page, `role="alert"`) {
		t.Error("page without a language or an alert region for errors")
	}
}

// TestUIContentSecurityPolicy: the page runs its own script and style only,
// talks to its own origin only, and the hashes match the blocks.
func TestUIContentSecurityPolicy(t *testing.T) {
	page, h := uiPage(t)
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "base-uri 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP allows unsafe sources: %q", csp)
	}
	for _, tag := range []string{"script", "style"} {
		blocks := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(page, -1)
		if len(blocks) != 1 {
			t.Fatalf("%d <%s> blocks, want 1", len(blocks), tag)
		}
		sum := sha256.Sum256([]byte(blocks[0][1]))
		want := tag + "-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
}

// TestUIScriptSyntax checks the script with Node.js where it is installed
// (the browser test in test/ui runs it for real).
func TestUIScriptSyntax(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed; test/ui runs the script in Chromium")
	}
	page, _ := uiPage(t)
	m := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no script")
	}
	file := filepath.Join(t.TempDir(), "ui.js")
	if err := os.WriteFile(file, []byte(m[1]), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(node, "--check", file).CombinedOutput(); err != nil {
		t.Fatalf("node --check: %v\n%s", err, out)
	}
}
