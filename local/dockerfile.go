package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
)

// dockerImage is what the provider takes from a template's Dockerfile: the
// settings of its final stage, the image the function would run in. The
// Dockerfile is read, never executed: RUN, COPY and FROM lines only matter
// for where the final stage begins.
type dockerImage struct {
	// Env holds the final stage's ENV in order of appearance; a later ENV
	// of the same name wins.
	Env     map[string]string
	EnvKeys []string
	WorkDir string // the last WORKDIR, absolute ("/" when none)
	User    string
	Cmd     []string // CMD, exec or shell form; shell form is ["sh", "-c", line]
}

// parseDockerfile reads the final stage of a Dockerfile.
func parseDockerfile(data []byte) (dockerImage, error) {
	img := newDockerImage()
	stages := 0
	named := map[string]dockerImage{} // stages by their AS name, for FROM <stage>
	current := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var cont strings.Builder
	lineNo := 0
	for sc.Scan() {
		lineNo++
		raw := strings.TrimRight(sc.Text(), " \t\r")
		trimmed := strings.TrimSpace(raw)
		if cont.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // comment lines inside a continued instruction are dropped, as BuildKit does
		}
		if strings.HasSuffix(raw, `\`) {
			cont.WriteString(strings.TrimSuffix(raw, `\`))
			cont.WriteByte(' ')
			continue
		}
		cont.WriteString(raw)
		line := strings.TrimSpace(cont.String())
		cont.Reset()
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			// A new stage starts from its base: an earlier stage's settings,
			// else afresh. Only the last stage is the image.
			stages++
			var base, alias string
			words := strings.Fields(rest)
			for i := 0; i < len(words); i++ {
				switch {
				case strings.HasPrefix(words[i], "--"):
				case strings.EqualFold(words[i], "AS") && i+1 < len(words):
					alias = words[i+1]
					i++
				case base == "":
					base = words[i]
				}
			}
			if current != "" {
				named[current] = img
			}
			if prev, ok := named[strings.ToLower(base)]; ok {
				img = prev.clone()
			} else {
				img = newDockerImage()
			}
			current = strings.ToLower(alias)
		case "ENV":
			kvs, err := parseEnvInstruction(rest)
			if err != nil {
				return dockerImage{}, fmt.Errorf("line %d: ENV: %w", lineNo, err)
			}
			for _, kv := range kvs {
				img.setEnv(kv[0], expandEnv(kv[1], img.Env))
			}
		case "WORKDIR":
			dir := expandEnv(unquote(rest), img.Env)
			if !path.IsAbs(dir) {
				dir = path.Join(img.WorkDir, dir)
			}
			img.WorkDir = path.Clean(dir)
		case "USER":
			img.User = expandEnv(rest, img.Env)
		case "CMD":
			img.Cmd = parseCmd(rest)
		}
	}
	if err := sc.Err(); err != nil {
		return dockerImage{}, fmt.Errorf("read: %w", err)
	}
	if stages == 0 {
		return dockerImage{}, fmt.Errorf("no FROM line: not a Dockerfile")
	}
	return img, nil
}

func newDockerImage() dockerImage { return dockerImage{Env: map[string]string{}, WorkDir: "/"} }

func (img dockerImage) clone() dockerImage {
	c := img
	c.Env = make(map[string]string, len(img.Env))
	for k, v := range img.Env {
		c.Env[k] = v
	}
	c.EnvKeys = append([]string(nil), img.EnvKeys...)
	c.Cmd = append([]string(nil), img.Cmd...)
	return c
}

func (img *dockerImage) setEnv(k, v string) {
	if _, ok := img.Env[k]; !ok {
		img.EnvKeys = append(img.EnvKeys, k)
	}
	img.Env[k] = v
}

// readDockerfile parses the Dockerfile in dir.
func readDockerfile(dir string) (dockerImage, error) {
	data, err := os.ReadFile(path.Join(dir, "Dockerfile"))
	if err != nil {
		return dockerImage{}, err
	}
	img, err := parseDockerfile(data)
	if err != nil {
		return dockerImage{}, fmt.Errorf("%s: %w", path.Join(dir, "Dockerfile"), err)
	}
	return img, nil
}

// parseEnvInstruction splits ENV's two forms: "KEY value with spaces" and
// "K1=v1 K2="v 2"".
func parseEnvInstruction(s string) ([][2]string, error) {
	if s == "" {
		return nil, fmt.Errorf("no variable")
	}
	first, rest, _ := strings.Cut(s, " ")
	if !strings.Contains(first, "=") {
		return [][2]string{{first, unquote(strings.TrimSpace(rest))}}, nil
	}
	var out [][2]string
	for _, word := range splitWords(s) {
		k, v, ok := strings.Cut(word, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not KEY=value", word)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}

// splitWords splits on blanks outside quotes and removes the quotes, as a
// shell would for the simple words Dockerfiles use.
func splitWords(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	inWord := false
	for i := 0; i < len(s); i++ {
		c := rune(s[i])
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\''):
			quote, inWord = c, true
		case c == '\\' && i+1 < len(s) && quote != '\'':
			i++
			cur.WriteByte(s[i])
			inWord = true
		case quote == 0 && (c == ' ' || c == '\t'):
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

func unquote(s string) string {
	if w := splitWords(s); len(w) == 1 {
		return w[0]
	}
	return s
}

// expandEnv replaces $VAR and ${VAR} with what the stage set so far;
// unknown variables become empty, as in a build without that ARG.
func expandEnv(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	return os.Expand(s, func(k string) string { return env[k] })
}

func parseCmd(s string) []string {
	if strings.HasPrefix(s, "[") {
		var argv []string
		if json.Unmarshal([]byte(s), &argv) == nil {
			return argv
		}
	}
	return []string{"sh", "-c", s}
}
