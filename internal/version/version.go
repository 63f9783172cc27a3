// Package version is the release every vmlane binary was built from.
//
// The build stamps it: `make build` (and `make release VERSION=vX.Y.Z`)
// links with
//
//	-ldflags "-X github.com/vmlane/vmlane/internal/version.Version=vX.Y.Z"
//
// where the default is `git describe --tags --always --dirty` of the
// checkout. A binary built without the flag (`go build`, `go test`) says
// "dev". vmlane, vmlaned and vmlanectl print it with --version; vmlaned
// logs it at start and exports it as vmlane_build_info{version}.
package version

import (
	"fmt"
	"regexp"
	"runtime"
)

// Version is the release, set at link time; "dev" when it was not.
var Version = "dev"

// String is the line --version prints: the program, the release and the
// Go toolchain, OS and architecture it was built for.
func String(program string) string {
	return fmt.Sprintf("%s %s (%s, %s/%s)", program, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// releaseRE is what a release tag looks like: semantic versioning with a
// leading v, as Go modules, Helm charts and image tags all take it.
var releaseRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// IsRelease reports whether v is a release version (vMAJOR.MINOR.PATCH,
// optionally with a pre-release suffix such as -rc.1), which is what
// `make release` accepts as VERSION.
func IsRelease(v string) bool { return releaseRE.MatchString(v) }
