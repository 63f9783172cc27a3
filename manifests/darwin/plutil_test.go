package darwin_test

// A fake plutil as strict as Apple's: -lint refuses a file that is not
// well-formed XML (an XML comment with "--" in it, say) or not a property
// list, and -replace edits the property list and writes it back as XML, as
// plutil does, rather than taking any text. TestInstall runs install.sh
// with this test binary as its plutil; TestShippedPlists holds every plist
// of the repository to the same parse.

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"howett.net/plist"
)

func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "plutil" {
		if err := plutil(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// plutil does what install.sh asks of Apple's plutil: -lint FILE... and
// -replace KEYPATH (-string VALUE | -json JSON) FILE.
func plutil(args []string) error {
	switch {
	case len(args) >= 2 && args[0] == "-lint":
		for _, f := range args[1:] {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			if err := checkPlist(data); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			fmt.Printf("%s: OK\n", f)
		}
		return nil
	case len(args) == 5 && args[0] == "-replace":
		keyPath, kind, value, file := args[1], args[2], args[3], args[4]
		var v any
		switch kind {
		case "-string":
			v = value
		case "-json":
			if err := json.Unmarshal([]byte(value), &v); err != nil {
				return fmt.Errorf("-json %q: %w", value, err)
			}
		default:
			return fmt.Errorf("plutil: unknown type %s", kind)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if err := checkPlist(data); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var root map[string]any
		if _, err := plist.Unmarshal(data, &root); err != nil {
			return err
		}
		d := root
		keys := strings.Split(keyPath, ".")
		for _, k := range keys[:len(keys)-1] {
			next, ok := d[k].(map[string]any)
			if !ok {
				return fmt.Errorf("%s: %s is not a dictionary", file, k)
			}
			d = next
		}
		d[keys[len(keys)-1]] = v
		out, err := plist.MarshalIndent(root, plist.XMLFormat, "\t")
		if err != nil {
			return err
		}
		return os.WriteFile(file, out, 0o644)
	}
	return fmt.Errorf("plutil: the fake does not know %q", args)
}

// checkPlist is plutil -lint's judgement: a binary plist that decodes, or
// well-formed XML (encoding/xml in strict mode refuses "--" in a comment,
// as XML 1.0 does) that decodes as a property list.
func checkPlist(data []byte) error {
	if !bytes.HasPrefix(data, []byte("bplist")) {
		dec := xml.NewDecoder(bytes.NewReader(data))
		dec.Strict = true
		for {
			_, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("not well-formed XML: %w", err)
			}
		}
	}
	var v any
	if _, err := plist.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("not a property list: %w", err)
	}
	return nil
}

// TestShippedPlists: every property list of the repository, the launchd
// job vmlane installs and the vmnet plists vmlaned writes (the golden
// files of its edits), passes plutil -lint's parse; the parse refuses what
// Apple's does.
func TestShippedPlists(t *testing.T) {
	var files []string
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".cache") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".plist") || strings.HasSuffix(p, ".plist.golden") || strings.HasSuffix(p, ".entitlements") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("found %d plists, want the launchd job and pf's testdata: %v", len(files), files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPlist(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for name, bad := range map[string]string{
		"-- in a comment": `<?xml version="1.0"?><plist version="1.0"><dict><!-- its --log-file --><key>a</key><string>b</string></dict></plist>`,
		"unclosed":        `<?xml version="1.0"?><plist version="1.0"><dict><key>a</key><string>b</string></dict>`,
		"not a plist":     `<?xml version="1.0"?><html></html>`,
	} {
		if err := checkPlist([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
