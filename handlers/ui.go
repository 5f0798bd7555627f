package handlers

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// uiPage is the GPU map: one self-contained page (inline CSS and JS, no
// external URL) that renders /system/gpus and refreshes it.
//
//go:embed ui/index.html
var uiPage []byte

// uiPolicy is sent with the page: it runs only its own
// inline script and style (by hash), talks only to this origin and loads
// nothing from anywhere else.
var uiPolicy = uiCSP(uiPage)

// uiStarted is the page's Last-Modified: the page changes only with the
// binary.
var uiStarted = time.Now()

// MakeUIHandler serves the GPU map page at /ui/ (and /ui/index.html) and
// redirects /ui to /ui/. Register it with a path prefix of /ui, behind the
// same basic auth as /system/*: the page fetches ../system/gpus and the
// browser re-sends the credentials it logged in with.
func MakeUIHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ui":
			// Relative (http.Redirect would make it /ui/), so it also works
			// behind a proxy that adds a path prefix.
			loc := "ui/"
			if r.URL.RawQuery != "" {
				loc += "?" + r.URL.RawQuery
			}
			w.Header().Set("Location", loc)
			w.WriteHeader(http.StatusMovedPermanently)
			return
		case "/ui/", "/ui/index.html":
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", uiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, "index.html", uiStarted, bytes.NewReader(uiPage))
	}
}

// uiCSP allows exactly the inline <script> and <style> blocks of page.
func uiCSP(page []byte) string {
	hashes := func(tag string) string {
		var out []string
		for _, body := range inlineBlocks(string(page), tag) {
			sum := sha256.Sum256([]byte(body))
			out = append(out, fmt.Sprintf("'sha256-%s'", base64.StdEncoding.EncodeToString(sum[:])))
		}
		return strings.Join(out, " ")
	}
	return "default-src 'none'; script-src " + hashes("script") + "; style-src " + hashes("style") +
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// inlineBlocks returns the text of every <tag>…</tag> block (attribute-less
// opening tag) of page, as the browser hashes it.
func inlineBlocks(page, tag string) []string {
	open, end := "<"+tag+">", "</"+tag+">"
	var out []string
	for {
		i := strings.Index(page, open)
		if i < 0 {
			return out
		}
		page = page[i+len(open):]
		j := strings.Index(page, end)
		if j < 0 {
			return out
		}
		out = append(out, page[:j])
		page = page[j+len(end):]
	}
}
