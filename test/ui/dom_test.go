package ui_test

import (
	"encoding/xml"
	"io"
	"regexp"
	"strings"
)

// node is an element of the DOM Chromium dumped, read with encoding/xml in
// its HTML-tolerant mode (the module has no HTML parser). Script and style
// bodies are dropped first: they are not markup.
type node struct {
	Tag      string
	Attr     map[string]string
	Children []*node
	parts    []any // text (string) and children (*node) in document order
}

var scriptOrStyle = regexp.MustCompile(`(?is)<(script|style)\b[^>]*>.*?</(script|style)>`)

func parseDOM(html string) (*node, error) {
	html = scriptOrStyle.ReplaceAllString(html, "")
	d := xml.NewDecoder(strings.NewReader(html))
	d.Strict = false
	d.AutoClose = xml.HTMLAutoClose
	d.Entity = xml.HTMLEntity
	root := &node{Tag: "#root", Attr: map[string]string{}}
	stack := []*node{root}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return root, nil
		}
		if err != nil {
			return nil, err
		}
		top := stack[len(stack)-1]
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &node{Tag: strings.ToLower(tok.Name.Local), Attr: map[string]string{}}
			for _, a := range tok.Attr {
				name := a.Name.Local
				if a.Name.Space != "" {
					name = a.Name.Space + ":" + name
				}
				n.Attr[strings.ToLower(name)] = a.Value
			}
			top.Children = append(top.Children, n)
			top.parts = append(top.parts, n)
			stack = append(stack, n)
		case xml.EndElement:
			name := strings.ToLower(tok.Name.Local)
			for i := len(stack) - 1; i > 0; i-- {
				if stack[i].Tag == name {
					stack = stack[:i]
					break
				}
			}
		case xml.CharData:
			top.parts = append(top.parts, string(tok))
		}
	}
}

// Text is the element's text with runs of white space made one space, as a
// reader sees it.
func (n *node) Text() string {
	var b strings.Builder
	var walk func(*node)
	walk = func(n *node) {
		for _, p := range n.parts {
			switch p := p.(type) {
			case string:
				b.WriteString(p)
			case *node:
				b.WriteString(" ")
				walk(p)
				b.WriteString(" ")
			}
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// HasClass reports whether the class attribute holds c.
func (n *node) HasClass(c string) bool {
	for _, f := range strings.Fields(n.Attr["class"]) {
		if f == c {
			return true
		}
	}
	return false
}

// All returns every descendant that match accepts, in document order.
func (n *node) All(match func(*node) bool) []*node {
	var out []*node
	var walk func(*node)
	walk = func(n *node) {
		for _, c := range n.Children {
			if match(c) {
				out = append(out, c)
			}
			walk(c)
		}
	}
	walk(n)
	return out
}

// First is the first descendant that match accepts, or nil.
func (n *node) First(match func(*node) bool) *node {
	if all := n.All(match); len(all) > 0 {
		return all[0]
	}
	return nil
}

func byID(id string) func(*node) bool { return func(n *node) bool { return n.Attr["id"] == id } }

func byTag(tag string) func(*node) bool { return func(n *node) bool { return n.Tag == tag } }

func byClass(tag, class string) func(*node) bool {
	return func(n *node) bool { return (tag == "" || n.Tag == tag) && n.HasClass(class) }
}

func byAttr(tag, attr, value string) func(*node) bool {
	return func(n *node) bool {
		v, ok := n.Attr[attr]
		return (tag == "" || n.Tag == tag) && ok && v == value
	}
}

// styleProp reads one property of an inline style attribute.
func styleProp(n *node, prop string) string {
	for _, decl := range strings.Split(n.Attr["style"], ";") {
		k, v, ok := strings.Cut(decl, ":")
		if ok && strings.TrimSpace(k) == prop {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
