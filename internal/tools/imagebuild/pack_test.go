package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// readBack reads the image tagged tag from the tarball at path (see
// readImage) and returns its config, its layer's entries, one line each
// (type, name, permissions, link target), and its digest. Every entry
// must be owned by the files' owner, the test's user.
func readBack(t *testing.T, path, tag string) (*v1.ConfigFile, []string, v1.Hash) {
	t.Helper()
	img := readImage(t, path, tag, nil)
	var entries []string
	for _, h := range img.headers {
		if h.Uid != os.Getuid() || h.Gid != os.Getgid() {
			t.Errorf("%s: owner %d:%d, want the files' own %d:%d", h.Name, h.Uid, h.Gid, os.Getuid(), os.Getgid())
		}
		entries = append(entries, strings.TrimSpace(string(h.Typeflag)+" "+h.Name+" "+os.FileMode(h.Mode).Perm().String()+" "+h.Linkname))
	}
	return img.config, entries, img.digest
}

// tree makes files under dir: "d/" a folder, "l -> target" a symlink,
// "h => target" a hard link, "f:0755" a file with that mode (0644 without),
// "p|" a fifo, "s=" a socket.
func tree(t *testing.T, dir string, spec []string) {
	t.Helper()
	for _, s := range spec {
		var err error
		switch {
		case strings.HasSuffix(s, "/"):
			err = os.MkdirAll(filepath.Join(dir, s), 0o755)
			// 0755 whatever the umask, parents too.
			for d := strings.TrimSuffix(s, "/"); err == nil && d != "."; d = filepath.Dir(d) {
				err = os.Chmod(filepath.Join(dir, d), 0o755)
			}
		case strings.Contains(s, " -> "):
			l, target, _ := strings.Cut(s, " -> ")
			err = os.Symlink(target, filepath.Join(dir, l))
		case strings.Contains(s, " => "):
			l, target, _ := strings.Cut(s, " => ")
			err = os.Link(filepath.Join(dir, target), filepath.Join(dir, l))
		case strings.HasSuffix(s, "|"):
			err = syscall.Mkfifo(filepath.Join(dir, strings.TrimSuffix(s, "|")), 0o644)
		case strings.HasSuffix(s, "="):
			// A socket's path may be at most 107 bytes: listen from dir.
			var l net.Listener
			wd, _ := os.Getwd()
			if err = os.Chdir(dir); err == nil {
				l, err = net.Listen("unix", strings.TrimSuffix(s, "="))
				os.Chdir(wd)
			}
			if err == nil {
				// Keep the socket file when the listener closes.
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			}
		default:
			f, mode := s, os.FileMode(0o644)
			if p, m, ok := strings.Cut(s, ":"); ok {
				n, perr := strconv.ParseUint(m, 8, 32)
				if perr != nil {
					t.Fatalf("%q: bad mode: %v", s, perr)
				}
				f, mode = p, os.FileMode(n)
			}
			p := filepath.Join(dir, f)
			if err = os.WriteFile(p, []byte("content of "+f), mode); err == nil {
				err = os.Chmod(p, mode) // past the umask
			}
		}
		if err != nil {
			t.Fatalf("making %q: %v", s, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestPack(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tree       []string
		entrypoint []string
		cmd        []string
		env        []string
		wantEnv    []string
		want       []string
	}{
		{
			name: "files, folders, symlinks, hard links",
			tree: []string{
				"usr/local/bin/", "usr/local/bin/tool:0755", "usr/local/bin/tool2 => usr/local/bin/tool",
				"etc-file:0600", "lib -> usr/lib", "usr/lib/",
			},
			entrypoint: []string{"/usr/local/bin/tool"},
			cmd:        []string{"serve"},
			wantEnv:    []string{defaultPath},
			want: []string{
				"0 etc-file -rw-------",
				"2 lib -rwxrwxrwx usr/lib",
				"5 usr/ -rwxr-xr-x",
				"5 usr/lib/ -rwxr-xr-x",
				"5 usr/local/ -rwxr-xr-x",
				"5 usr/local/bin/ -rwxr-xr-x",
				"0 usr/local/bin/tool -rwxr-xr-x",
				"1 usr/local/bin/tool2 -rwxr-xr-x usr/local/bin/tool",
			},
		},
		{
			name: "proc, sys and dev empty; fifos and sockets left out",
			tree: []string{
				"proc/", "proc/1/", "proc/1/status", "sys/", "sys/kernel", "dev/", "dev/null-ish",
				"run/", "run/fifo|", "run/sock=", "etc/proc/", "etc/proc/kept",
			},
			entrypoint: []string{"/bin/sh", "-c"},
			env:        []string{"A=1", "PATH=/bin"},
			wantEnv:    []string{"A=1", "PATH=/bin"},
			want: []string{
				"5 dev/ -rwxr-xr-x",
				"5 etc/ -rwxr-xr-x",
				"5 etc/proc/ -rwxr-xr-x",
				"0 etc/proc/kept -rw-r--r--",
				"5 proc/ -rwxr-xr-x",
				"5 run/ -rwxr-xr-x",
				"5 sys/ -rwxr-xr-x",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tree(t, dir, tc.tree)
			o := packOptions{Dir: dir, Tag: "example.test/img:v1", Out: filepath.Join(t.TempDir(), "img.tar"),
				Entrypoint: tc.entrypoint, Cmd: tc.cmd, Env: tc.env}
			if err := pack(o); err != nil {
				t.Fatal(err)
			}
			cf, got, digest := readBack(t, o.Out, o.Tag)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("layer entries (-want +got):\n%s", diff)
			}
			wantConfig := v1.Config{Entrypoint: tc.entrypoint, Cmd: tc.cmd, Env: tc.wantEnv}
			if diff := cmp.Diff(wantConfig, cf.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if _, err := os.Stat(o.Out + ".layer"); !os.IsNotExist(err) {
				t.Errorf("the layer's temporary file is left: %v", err)
			}

			// The same tree packs to the same image.
			o.Out = filepath.Join(t.TempDir(), "again.tar")
			if err := pack(o); err != nil {
				t.Fatal(err)
			}
			if _, _, again := readBack(t, o.Out, o.Tag); again != digest {
				t.Errorf("packing the same tree twice gave %s and %s", digest, again)
			}
		})
	}
}

// One -tag or several: each names the same image in the tarball, as the
// conformance images (agnhost under two versions) need.
func TestPackTags(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, []string{"agnhost:0755"})
	out := filepath.Join(t.TempDir(), "img.tar")
	tags := []string{"registry.k8s.io/e2e-test-images/agnhost:2.55", "registry.k8s.io/e2e-test-images/agnhost:2.66.1"}
	if err := run([]string{"pack", "-dir", dir, "-tag", tags[0], "-tag", tags[1], "-entrypoint", "/agnhost", "-cmd", "pause", "-o", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	cf, _, first := readBack(t, out, tags[0])
	if _, _, second := readBack(t, out, tags[1]); second != first {
		t.Errorf("%s is %s, %s is %s: want one image", tags[0], first, tags[1], second)
	}
	if diff := cmp.Diff([]string{"pause"}, cf.Config.Cmd); diff != "" {
		t.Errorf("cmd (-want +got):\n%s", diff)
	}
	if err := run([]string{"pack", "-dir", dir, "-tag", tags[0], "-tag", "Not A Reference", "-entrypoint", "/agnhost", "-o", out}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), `"Not A Reference"`) {
		t.Errorf("a bad second -tag: %v, want an error naming it", err)
	}
}

func TestPause(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "some-build-output")
	if err := os.WriteFile(bin, []byte("\x7fELF..."), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pause.tar")
	if err := run([]string{"pause", "-bin", bin, "-o", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	cf, got, _ := readBack(t, out, pauseTag)
	if diff := cmp.Diff([]string{"0 pause -rwxr-xr-x"}, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/pause"}, cf.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".pause-*")); len(left) > 0 {
		t.Errorf("staging folders left: %q", left)
	}
}

func TestRunErrors(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out.tar")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no subcommand"},
		{[]string{"-dir", "."}, `unknown subcommand "-dir"`},
		{[]string{"pack", "-tag", "a:b", "-o", out, "-entrypoint", "/x"}, "-dir is required"},
		{[]string{"pack", "-dir", ".", "-o", out, "-entrypoint", "/x"}, "-tag is required"},
		{[]string{"pack", "-dir", ".", "-tag", "a:b", "-entrypoint", "/x"}, "-o is required"},
		{[]string{"pack", "-dir", ".", "-tag", "a:b", "-o", out}, "-entrypoint is required"},
		{[]string{"pack", "-dir", tmp + "/missing", "-tag", "a:b", "-o", out, "-entrypoint", "/x"}, `invalid -dir "` + tmp + `/missing": stat`},
		{[]string{"pack", "-dir", file, "-tag", "a:b", "-o", out, "-entrypoint", "/x"}, `invalid -dir "` + file + `": not a folder`},
		{[]string{"pack", "-dir", ".", "-tag", "a:b", "-o", out, "-entrypoint", "/x", "-env", "NOVALUE"}, `invalid -env "NOVALUE": want KEY=VALUE`},
		{[]string{"pack", "-dir", ".", "-tag", "a:b", "-o", out, "-entrypoint", "/x", "-env", "=v"}, `invalid -env "=v"`},
		{[]string{"pack", "-dir", ".", "-tag", "UPPER CASE", "-o", out, "-entrypoint", "/x"}, `invalid -tag "UPPER CASE"`},
		{[]string{"pack", "-dir", ".", "-tag", "a:b", "-o", out, "-entrypoint", "/x", "stray"}, `unexpected argument "stray"`},
		{[]string{"pack", "-nosuch"}, "flag provided but not defined: -nosuch"},
		{[]string{"pause", "-o", out}, "-bin is required"},
		{[]string{"pause", "-bin", file}, "-o is required"},
		{[]string{"pause", "-bin", tmp, "-o", out}, `invalid -bin "` + tmp + `": not a regular file`},
		{[]string{"pause", "-bin", file, "-o", out, "-tag", "bad tag"}, `invalid -tag "bad tag"`},
		{[]string{"pack", "-dir", ".", "-tag", "a:b", "-o", out, "-entrypoint", "/x", "-arch", "riscv64"}, `invalid -arch "riscv64"`},
		{[]string{"index", "-oci", out}, "-tag is required"},
		{[]string{"index", "-tag", "a:b", "-oci", out}, "no image tarballs given"},
		{[]string{"index", "-tag", "a:b", "-oci", out, file}, "reading " + file},
	} {
		err := run(tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) != 1 {
		t.Errorf("failed runs left files behind: %q", left)
	}
}
