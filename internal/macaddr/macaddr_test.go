package macaddr

import "testing"

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"02:76:0a:f4:03:07", "02:76:0a:f4:03:07"},
		{"02:76:0A:F4:03:07", "02:76:0a:f4:03:07"},
		{"2:76:a:f4:3:7", "02:76:0a:f4:03:07"}, // macOS bootpd
		{"02-76-0a-f4-03-07", "02:76:0a:f4:03:07"},
		{"2-76-a-f4-3-7", "02:76:0a:f4:03:07"},
		{"0276.0af4.0307", "02:76:0a:f4:03:07"},
		{"ff:ff:ff:ff:ff:ff", "ff:ff:ff:ff:ff:ff"},
		{"", ""},
		{"02:76:0a:f4:03", ""},
		{"02:76:0a:f4:03:07:08", ""},
		{"02:76:0a:f4:03:", ""},
		{":02:76:0a:f4:03", ""},
		{"02::76:0a:f4:03", ""},
		{"02:76-0a:f4:03:07", ""}, // mixed separators
		{"002:76:0a:f4:03:07", ""},
		{"02:76:0a:f4:03:0g", ""},
		{"00:00:00:00:00:00:00:00", ""}, // EUI-64: not a 48-bit MAC
		{"02:76:0a:f4:03:07 ", ""},
	} {
		got, err := Normalize(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("Normalize(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if !Canonical(got) {
			t.Errorf("Canonical(%q) = false", got)
		}
	}
	if Canonical("02:76:0A:f4:03:07") || Canonical("02-76-0a-f4-03-07") {
		t.Error("Canonical accepts a non-canonical spelling")
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"02:76:0a:f4:03:07", "2:0:a:f4:5:7", "0276.0af4.0307", "02-76-0a-f4-03-07", "::::", "0:0:0:0:0:0:0:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := Normalize(s)
		if err != nil {
			return
		}
		if !Canonical(m) {
			t.Fatalf("Normalize(%q) = %q, not canonical", s, m)
		}
		if again, err := Normalize(m); err != nil || again != m {
			t.Fatalf("Normalize(%q) = %q, %v: not idempotent", m, again, err)
		}
	})
}

func BenchmarkNormalizeCanonical(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Normalize("02:76:0a:f4:03:07"); err != nil {
			b.Fatal(err)
		}
	}
}
