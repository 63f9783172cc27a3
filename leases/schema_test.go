package leases_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vmlane/vmlane/leases"
)

// The tests in this file keep schema.json from drifting away from the Go
// types: its property names must be exactly the json tags, its required
// lists exactly the members the encoder always writes, its enums exactly the
// State and Source constants (beside which a newer writer's values are
// allowed), and files the store writes must validate.

const draft202012 = "https://json-schema.org/draft/2020-12/schema"

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("schema.json is not valid JSON: %v", err)
	}
	return s
}

// jsonTags returns the JSON member names of a struct type and which of them
// the encoder always writes (no omitempty or omitzero).
func jsonTags(t *testing.T, typ reflect.Type) (names, always []string) {
	t.Helper()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, ok := f.Tag.Lookup("json")
		if !ok {
			t.Fatalf("%s.%s has no json tag: the schema cannot name it", typ, f.Name)
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
		o := strings.Split(opts, ",")
		if !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero") {
			always = append(always, name)
		}
	}
	slices.Sort(names)
	slices.Sort(always)
	return names, always
}

// resolve follows a local "$ref" ("#/$defs/name").
func resolve(t *testing.T, root map[string]any, s map[string]any) map[string]any {
	t.Helper()
	ref, ok := s["$ref"].(string)
	if !ok {
		return s
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		t.Fatalf("$ref %q: only local #/$defs/ references are used", ref)
	}
	defs, _ := root["$defs"].(map[string]any)
	d, ok := defs[name].(map[string]any)
	if !ok {
		t.Fatalf("$ref %q names no definition", ref)
	}
	return resolve(t, root, d)
}

func propsAndRequired(t *testing.T, s map[string]any) (props, required []string) {
	t.Helper()
	p, ok := s["properties"].(map[string]any)
	if !ok {
		t.Fatalf("schema %v has no properties", s["description"])
	}
	for k := range p {
		props = append(props, k)
	}
	for _, r := range asSlice(s["required"]) {
		required = append(required, r.(string))
	}
	slices.Sort(props)
	slices.Sort(required)
	return props, required
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// subschemas returns the schemas of the top level, a lease and a pod.
func subschemas(t *testing.T, root map[string]any) (file, lease, pod map[string]any) {
	t.Helper()
	props := root["properties"].(map[string]any)
	leasesProp := resolve(t, root, props["leases"].(map[string]any))
	lease = resolve(t, root, leasesProp["items"].(map[string]any))
	pod = resolve(t, root, lease["properties"].(map[string]any)["pod"].(map[string]any))
	return root, lease, pod
}

func TestSchemaMatchesGoTypes(t *testing.T) {
	root := loadSchema(t)
	if root["$schema"] != draft202012 {
		t.Errorf("$schema = %v, want %s", root["$schema"], draft202012)
	}
	file, lease, pod := subschemas(t, root)
	for _, tc := range []struct {
		name   string
		schema map[string]any
		typ    reflect.Type
	}{
		{"file", file, reflect.TypeFor[leases.File]()},
		{"lease", lease, reflect.TypeFor[leases.Lease]()},
		{"pod", pod, reflect.TypeFor[leases.Pod]()},
	} {
		props, required := propsAndRequired(t, tc.schema)
		names, always := jsonTags(t, tc.typ)
		if diff := cmp.Diff(names, props); diff != "" {
			t.Errorf("%s: schema properties differ from the json tags of %s (-go +schema):\n%s", tc.name, tc.typ, diff)
		}
		// Members without omitempty/omitzero are in every file a store
		// writes; the schema's required list says exactly that.
		if diff := cmp.Diff(always, required); diff != "" {
			t.Errorf("%s: schema required differs from the members %s always encodes (-go +schema):\n%s", tc.name, tc.typ, diff)
		}
		for name, p := range tc.schema["properties"].(map[string]any) {
			if d, _ := p.(map[string]any)["description"].(string); d == "" {
				t.Errorf("%s.%s has no description", tc.name, name)
			}
		}
	}
}

func TestSchemaEnumsMatchConstants(t *testing.T) {
	root := loadSchema(t)
	_, lease, _ := subschemas(t, root)
	props := lease["properties"].(map[string]any)
	// The enum is the first alternative; the other admits a newer
	// writer's values (testdata/newer-binary.json validates).
	enum := func(name string) []string {
		var out []string
		first := asSlice(props[name].(map[string]any)["anyOf"])[0].(map[string]any)
		for _, v := range asSlice(first["enum"]) {
			out = append(out, v.(string))
		}
		slices.Sort(out)
		return out
	}
	states := []string{string(leases.StateBound), string(leases.StateDeclined), string(leases.StateHeld), string(leases.StateReserved)}
	if diff := cmp.Diff(states, enum("state")); diff != "" {
		t.Errorf("state enum (-go +schema):\n%s", diff)
	}
	sources := []string{string(leases.SourceCNI), string(leases.SourceDHCP)}
	if diff := cmp.Diff(sources, enum("source")); diff != "" {
		t.Errorf("source enum (-go +schema):\n%s", diff)
	}
	if v := root["properties"].(map[string]any)["version"].(map[string]any)["enum"]; !cmp.Equal(v, []any{float64(leases.Version), float64(leases.MaxVersion)}) {
		t.Errorf("version enum = %v, want [%d %d]", v, leases.Version, leases.MaxVersion)
	}
}

// storeWrittenFile returns a lease file the store wrote, holding every kind
// of lease and every optional member.
func storeWrittenFile(t *testing.T) []byte {
	t.Helper()
	subnet := netip.MustParsePrefix("10.244.3.0/24")
	s, err := leases.Open(filepath.Join(t.TempDir(), "leases.json"), subnet, netip.MustParseAddr("10.244.3.1"), leases.WithNode("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cni, err := s.Reserve(leases.ReserveRequest{
		Key:   leases.Key{ContainerID: strings.Repeat("4f", 32), IfName: "eth0"},
		NetNS: "/var/run/netns/cni-1234", Pod: leases.Pod{Namespace: "vms", Name: "vm-a", UID: "5b1e7c2d-0000-4000-8000-000000000001"},
		MAC: "02:00:0a:f4:03:02",
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Bind(cni.MAC, cni.IP, now.Add(time.Hour), "vm-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(leases.ReserveRequest{Key: leases.Key{ContainerID: "c2", IfName: "net1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(leases.ReserveRequest{MAC: "52:54:00:12:34:56", Expires: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decline(netip.MustParseAddr("10.244.3.200"), "52:54:00:ab:cd:ef", now.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestLeaseFilesValidateAgainstSchema(t *testing.T) {
	root := loadSchema(t)
	example, err := os.ReadFile("testdata/example.json")
	if err != nil {
		t.Fatal(err)
	}
	// A newer writer's file (members and a state and source version 1
	// does not define) is a version 1 file too.
	newer, err := os.ReadFile("testdata/newer-binary.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"testdata/example.json": example, "testdata/newer-binary.json": newer, "store output": storeWrittenFile(t)} {
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := validateSchema(root, root, doc, "$"); err != nil {
			t.Errorf("%s does not validate against schema.json: %v", name, err)
		}
	}
}

// TestSchemaRejects shows that the schema (and the validator used above)
// says something: each mutation of a valid file must be rejected.
func TestSchemaRejects(t *testing.T) {
	root := loadSchema(t)
	base := storeWrittenFile(t)
	lease0 := func(d map[string]any) map[string]any { return d["leases"].([]any)[0].(map[string]any) }
	for name, mutate := range map[string]func(d map[string]any){
		"version 3":           func(d map[string]any) { d["version"] = 3.0 },
		"no version":          func(d map[string]any) { delete(d, "version") },
		"no leases":           func(d map[string]any) { delete(d, "leases") },
		"subnet not CIDR":     func(d map[string]any) { d["subnet"] = "10.244.3.0" },
		"gateway not an IP":   func(d map[string]any) { d["gateway"] = "gw" },
		"uppercase mac":       func(d map[string]any) { lease0(d)["mac"] = "02:00:0A:F4:03:02" },
		"dash mac":            func(d map[string]any) { lease0(d)["mac"] = "02-00-0a-f4-03-02" },
		"short mac":           func(d map[string]any) { lease0(d)["mac"] = "2:0:a:f4:3:2" },
		"mac missing":         func(d map[string]any) { delete(lease0(d), "mac") },
		"ip not an IP":        func(d map[string]any) { lease0(d)["ip"] = "10.244.3" },
		"ip missing":          func(d map[string]any) { delete(lease0(d), "ip") },
		"empty state":         func(d map[string]any) { lease0(d)["state"] = "" },
		"state a number":      func(d map[string]any) { lease0(d)["state"] = 1.0 },
		"empty source":        func(d map[string]any) { lease0(d)["source"] = "" },
		"source missing":      func(d map[string]any) { delete(lease0(d), "source") },
		"created not RFC3339": func(d map[string]any) { lease0(d)["created"] = "2026-11-22 17:00:00" },
		"expires a number":    func(d map[string]any) { lease0(d)["expires"] = 1.7e9 },
		"pod a string":        func(d map[string]any) { lease0(d)["pod"] = "vms/vm-a" },
		"pod uid a number":    func(d map[string]any) { lease0(d)["pod"].(map[string]any)["uid"] = 7.0 },
		"lease not an object": func(d map[string]any) { d["leases"].([]any)[0] = "10.244.3.2" },
	} {
		var doc map[string]any
		if err := json.Unmarshal(base, &doc); err != nil {
			t.Fatal(err)
		}
		mutate(doc)
		if err := validateSchema(root, root, doc, "$"); err == nil {
			t.Errorf("%s: validates against schema.json, want rejected", name)
		}
	}
}

// TestSchemaUsesOnlyKnownKeywords keeps schema.json within what
// validateSchema implements, so a keyword added later cannot be silently
// ignored by the tests above.
func TestSchemaUsesOnlyKnownKeywords(t *testing.T) {
	var walk func(s any, path string)
	walk = func(s any, path string) {
		m, ok := s.(map[string]any)
		if !ok {
			t.Errorf("%s: a schema must be an object, got %T", path, s)
			return
		}
		for k, v := range m {
			if !schemaKeywords[k] {
				t.Errorf("%s: keyword %q is not implemented by the test validator", path, k)
			}
			switch k {
			case "properties", "$defs":
				for name, sub := range v.(map[string]any) {
					walk(sub, path+"/"+k+"/"+name)
				}
			case "items":
				walk(v, path+"/items")
			case "anyOf":
				for i, sub := range asSlice(v) {
					walk(sub, fmt.Sprintf("%s/anyOf/%d", path, i))
				}
			}
		}
	}
	walk(loadSchema(t), "#")
}

var schemaKeywords = map[string]bool{
	"$schema": true, "$id": true, "$defs": true, "$ref": true, "title": true, "description": true,
	"type": true, "properties": true, "required": true, "items": true,
	"enum": true, "const": true, "pattern": true, "anyOf": true, "format": true,
}

// validateSchema is the subset of a JSON Schema 2020-12 validator that
// schema.json uses (TestSchemaUsesOnlyKnownKeywords keeps it that way);
// formats are asserted, not just annotated. The module has no schema
// library and leases depends on the standard library only.
func validateSchema(root map[string]any, schema, inst any, path string) error {
	s := schema.(map[string]any)
	if ref, ok := s["$ref"].(string); ok {
		name, _ := strings.CutPrefix(ref, "#/$defs/")
		def, ok := root["$defs"].(map[string]any)[name]
		if !ok {
			return fmt.Errorf("%s: unresolvable $ref %q", path, ref)
		}
		if err := validateSchema(root, def, inst, path); err != nil {
			return err
		}
	}
	if typ, ok := s["type"].(string); ok {
		if err := checkType(typ, inst); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if c, ok := s["const"]; ok && !reflect.DeepEqual(c, inst) {
		return fmt.Errorf("%s: %v is not %v", path, inst, c)
	}
	if e, ok := s["enum"]; ok && !slices.ContainsFunc(asSlice(e), func(v any) bool { return reflect.DeepEqual(v, inst) }) {
		return fmt.Errorf("%s: %v is not one of %v", path, inst, e)
	}
	if str, isStr := inst.(string); isStr {
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match %s", path, str, p)
		}
		if f, ok := s["format"].(string); ok {
			if err := checkFormat(f, str); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if alts, ok := s["anyOf"]; ok {
		var errs []string
		for _, sub := range asSlice(alts) {
			err := validateSchema(root, sub, inst, path)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err.Error())
		}
		if errs != nil {
			return fmt.Errorf("%s: matches none of anyOf: %s", path, strings.Join(errs, "; "))
		}
	}
	if obj, isObj := inst.(map[string]any); isObj {
		for _, r := range asSlice(s["required"]) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: required member %q is missing", path, r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		for k, v := range obj {
			if sub, ok := props[k]; ok {
				if err := validateSchema(root, sub, v, path+"."+k); err != nil {
					return err
				}
			}
		}
	}
	if arr, isArr := inst.([]any); isArr {
		if items, ok := s["items"]; ok {
			for i, v := range arr {
				if err := validateSchema(root, items, v, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func checkType(typ string, inst any) error {
	ok := false
	switch typ {
	case "object":
		_, ok = inst.(map[string]any)
	case "array":
		_, ok = inst.([]any)
	case "string":
		_, ok = inst.(string)
	case "integer":
		f, isNum := inst.(float64)
		ok = isNum && f == float64(int64(f))
	case "number":
		_, ok = inst.(float64)
	case "boolean":
		_, ok = inst.(bool)
	default:
		return fmt.Errorf("type %q is not implemented by the test validator", typ)
	}
	if !ok {
		return fmt.Errorf("%v (%T) is not of type %s", inst, inst, typ)
	}
	return nil
}

func checkFormat(format, s string) error {
	switch format {
	case "date-time":
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			return fmt.Errorf("%q is not an RFC 3339 date-time", s)
		}
	case "ipv4":
		if a, err := netip.ParseAddr(s); err != nil || !a.Is4() {
			return fmt.Errorf("%q is not an IPv4 address", s)
		}
	case "ipv6":
		if a, err := netip.ParseAddr(s); err != nil || !a.Is6() || a.Zone() != "" {
			return fmt.Errorf("%q is not an IPv6 address", s)
		}
	default:
		return fmt.Errorf("format %q is not implemented by the test validator", format)
	}
	return nil
}
