// Command mdlinks checks the relative links of Markdown files: every
// [text](target) whose target is not a URL must name a file or folder that
// exists, and a #fragment into a Markdown file must name one of its
// headings (GitHub's anchors). `make lint` runs it over every Markdown file
// git tracks; it prints each broken link as FILE:LINE: and exits 1.
//
//	go run ./internal/tools/mdlinks README.md docs/*.md
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

func main() {
	var bad []string
	for _, f := range os.Args[1:] {
		bad = append(bad, check(f)...)
	}
	for _, b := range bad {
		fmt.Println(b)
	}
	if len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "mdlinks: %d broken links\n", len(bad))
		os.Exit(1)
	}
}

// linkRE finds inline links and images: [text](target) and
// [text](target "title"); reference definitions are not used here.
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// check returns the broken links of the Markdown file path.
func check(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	var bad []string
	inFence := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(stripCode(line), -1) {
			if why := broken(path, m[1]); why != "" {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: %s", path, i+1, m[1], why))
			}
		}
	}
	return bad
}

// stripCode blanks `inline code`, where brackets are not links.
func stripCode(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = strings.Repeat(" ", len(parts[i]))
	}
	return strings.Join(parts, "`")
}

// broken says why target, linked from the Markdown file from, does not
// resolve, or "" when it does.
func broken(from, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, frag, _ := strings.Cut(target, "#")
	if file == "" {
		file = from
	} else {
		file = filepath.Join(filepath.Dir(from), file)
	}
	st, err := os.Stat(file)
	if err != nil {
		return "no such file"
	}
	if frag == "" || st.IsDir() || !strings.HasSuffix(file, ".md") {
		return ""
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	for _, a := range anchors(string(data)) {
		if a == frag {
			return ""
		}
	}
	return "no heading with that anchor in " + file
}

// anchors are the ids GitHub gives the headings of a Markdown document:
// the heading's text lowercased, punctuation but hyphens and underscores
// dropped, spaces turned into hyphens, and -1, -2, ... after repeats.
func anchors(doc string) []string {
	var out []string
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		a := slug(text)
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
