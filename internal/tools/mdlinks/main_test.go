package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("docs/b.md", "# B\n## The `leases` file — format\n## Repeat\n## Repeat\n")
	a := write("a.md", `# A
Fine: [b](docs/b.md), [a heading](docs/b.md#the-leases-file--format), [again](docs/b.md#repeat-1),
[here](#a), [a folder](docs), [out](https://example.org/x#y) and [mail](mailto:x@example.org).
Broken: [gone](docs/c.md) and [no such heading](docs/b.md#nope), [nor here](#b).
`+"`[not a link](nowhere)`"+`
`+"```"+`
[in a fence](nowhere)
`+"```"+`
`)
	got := check(a)
	want := []string{
		a + ":4: docs/c.md: no such file",
		a + ":4: docs/b.md#nope: no heading with that anchor in " + filepath.Join(dir, "docs/b.md"),
		a + ":4: #b: no heading with that anchor in " + a,
	}
	if !slices.Equal(got, want) {
		t.Errorf("check:\n%q\nwant:\n%q", got, want)
	}
}
