package pf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmlane/vmlane/internal/atomicfile"
	"github.com/vmlane/vmlane/internal/command"
)

// DefaultStatePath is where vmlaned keeps its pf state: the anchor it
// loaded and the token of its pf enable reference, which `vmlanectl
// teardown` needs to give the reference back.
const DefaultStatePath = "/var/db/vmlane/pf.json"

// commandRunner runs pfctl (command.Exec; a recording fake in the tests).
type commandRunner = command.Runner

// pfState is the pf state file.
type pfState struct {
	Version int    `json:"version"`
	Anchor  string `json:"anchor"`
	// Token is the pf enable reference vmlaned holds (from pfctl -E), and
	// TokenCreated when it took it (whole seconds). A token's value alone
	// does not name it: xnu derives it from the kernel address of its
	// allocation and frees every token on `pfctl -d`, so another
	// holder's later token can carry the same value (see heldBy).
	Token        string    `json:"token,omitempty"`
	TokenCreated time.Time `json:"tokenCreated,omitzero"`
}

// PF is vmlane's hold on pf: its anchor and its enable reference.
type PF struct {
	anchor    string
	run       commandRunner
	statePath string
	st        pfState
	// applied is the rule set last loaded or found in place; nil until
	// then, so the first Ensure always looks at the kernel.
	applied []string
	// valuesOnly is set when the References listing did not show a token
	// just taken at the age heldBy expects: ages are then not understood
	// here, and a token is told by its value alone (else every full pass
	// would take one more reference).
	valuesOnly bool
}

// now is the clock that dates references (time.Now; the fake pfctl's in
// the tests, whose kernel stamps them).
var now = time.Now

// New returns vmlane's pf handle for anchor, with the state file at
// statePath. It reads the state file (a missing one is an empty state) but
// changes nothing.
func New(anchor string, r commandRunner, statePath string) (*PF, error) {
	if err := ValidAnchor(anchor); err != nil {
		return nil, err
	}
	p := &PF{anchor: anchor, run: r, statePath: statePath}
	st, err := readState[pfState](statePath, "pf")
	if err != nil {
		return nil, err
	}
	p.st = st
	p.st.Anchor = anchor
	return p, nil
}

// Anchor is the anchor's name.
func (p *PF) Anchor() string { return p.anchor }

// Token is the enable reference's token ("" before Enable).
func (p *PF) Token() string { return p.st.Token }

func (p *PF) save() error {
	p.st.Version = 1
	data, err := json.MarshalIndent(p.st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFileAll(p.statePath, append(data, '\n'), 0o600)
}

var tokenRE = regexp.MustCompile(`Token : ([0-9]+)`)

// ErrAgesNotUnderstood is Enable's warning that `pfctl -s References` did
// not list the token just taken at the age it was taken: vmlane then tells
// its reference by the value alone, and a reuse of the value after a
// `pfctl -d` goes unseen. pf is enabled all the same.
var ErrAgesNotUnderstood = errors.New("pfctl -s References does not list the reference at the age it was taken, so vmlane tells its reference by the value alone (a reuse of the value after a pfctl -d goes unseen)")

// tokenSlack is how far the creation time `pfctl -s References` implies
// may lie from the one vmlaned recorded: the listing shows ages in whole
// seconds, and a second or two pass between the kernel's timestamp and
// pfctl -E's return.
const tokenSlack = 5 * time.Second

// ageRE is a reference's age as pfctl -s References prints it in its
// TIMESTAMP column: "0 days 00:01:06".
var ageRE = regexp.MustCompile(`^([0-9]+) days? ([0-9]+):([0-9]{2}):([0-9]{2})$`)

// heldBy reports whether `pfctl -s References` output refs lists the
// reference token that was created at created (recorded when it was
// taken), now being now. The value must be listed, and where the listing
// gives the reference's age, the creation time it implies must be
// created, within tokenSlack: a listed value of another age is another
// holder's token that reused the value after a `pfctl -d` freed ours.
// Without created (a state file from before it was recorded) no listed
// value can be told from a reused one, so none counts as held.
func heldBy(refs, token string, created, now time.Time) bool {
	if token == "" || created.IsZero() {
		return false
	}
	for _, line := range strings.Split(refs, "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, token)
		if i < 0 {
			continue
		}
		age, ok := parseAge(strings.Join(f[i+1:], " "))
		if !ok {
			// A listing without the age this parser knows: the value
			// alone decides, as it must on a pfctl that prints none.
			return true
		}
		d := now.Add(-age).Sub(created)
		return d >= -tokenSlack && d <= tokenSlack
	}
	return false
}

// listed reports whether `pfctl -s References` output refs lists the
// token's value, whatever its age.
func listed(refs, token string) bool {
	if token == "" {
		return false
	}
	for _, line := range strings.Split(refs, "\n") {
		if slices.Contains(strings.Fields(line), token) {
			return true
		}
	}
	return false
}

// parseAge reads an age of the References listing: how long ago the
// reference was created (ok false if s is not one).
func parseAge(s string) (time.Duration, bool) {
	m := ageRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, false
	}
	var n [4]int
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return time.Duration(n[0])*24*time.Hour + time.Duration(n[1])*time.Hour + time.Duration(n[2])*time.Minute + time.Duration(n[3])*time.Second, true
}

// Enable makes sure pf is enabled with a reference of vmlane's own: the
// token saved in the state file if pf still holds it (a restarted
// vmlaned), a new one from `pfctl -E` otherwise (the first start, a
// reboot, which drops every reference, or a `pfctl -d`, which frees
// them all: a value listed again since is another holder's, heldBy). pf stays enabled while any
// reference is held, so vmlane neither depends on nor disturbs the
// references of vmnet's Internet Sharing or anyone else. It reports whether
// it took a new reference.
func (p *PF) Enable() (bool, error) {
	if p.st.Token != "" {
		refs, err := p.run.Run("", "pfctl", "-s", "References")
		if err != nil {
			return false, fmt.Errorf("pfctl -s References: %w", err)
		}
		if heldBy(refs, p.st.Token, p.st.TokenCreated, now()) || p.valuesOnly && listed(refs, p.st.Token) {
			return false, nil
		}
	}
	created := now().Truncate(time.Second)
	out, err := p.run.Run("", "pfctl", "-E")
	if err != nil {
		return false, fmt.Errorf("pfctl -E: %w", err)
	}
	m := tokenRE.FindStringSubmatch(out)
	if m == nil {
		return false, fmt.Errorf("pfctl -E printed no token: %q", strings.TrimSpace(out))
	}
	p.st.Token, p.st.TokenCreated = m[1], created.UTC()
	if err := p.save(); err != nil {
		// pf is enabled; only the record of the reference is missing, and
		// teardown cannot release what it does not know of.
		return true, fmt.Errorf("saving pf token %s: %w", p.st.Token, err)
	}
	// The token just taken must read as held: if the listing shows it at
	// another age, what this code makes of the ages is wrong on this
	// macOS, and values alone decide from now on.
	if refs, err := p.run.Run("", "pfctl", "-s", "References"); err == nil && !p.valuesOnly &&
		listed(refs, p.st.Token) && !heldBy(refs, p.st.Token, p.st.TokenCreated, now()) {
		p.valuesOnly = true
		return true, fmt.Errorf("pf reference %s: %w:\n%s", p.st.Token, ErrAgesNotUnderstood, refs)
	}
	return true, nil
}

// Ensure makes the anchor hold exactly rules. Unless full, it trusts that
// rules it loaded or found before are still there, and costs nothing when
// they have not changed; a full pass (the resync tick) reads the anchor
// back with `pfctl -a ANCHOR -s nat`, reloads it when anything differs,
// and takes the enable reference again if pf lost it (someone ran
// pfctl -d). It reports whether it loaded the anchor.
func (p *PF) Ensure(rules []string, full bool) (bool, error) {
	if rules == nil {
		rules = []string{}
	}
	if !full && p.applied != nil && slices.Equal(p.applied, rules) {
		return false, nil
	}
	var errs []error
	if full && p.applied != nil {
		if _, err := p.Enable(); err != nil {
			errs = append(errs, err)
		}
	}
	shown, err := p.run.Run("", "pfctl", "-a", p.anchor, "-s", "nat")
	if err == nil && slices.Equal(ParseShownRules(shown), rules) {
		p.applied = rules
		return false, errors.Join(errs...)
	}
	// A failed read is no reason not to load: loading replaces the
	// anchor's ruleset whatever it held.
	if _, err := p.run.Run(RenderAnchor(rules), "pfctl", "-a", p.anchor, "-f", "-"); err != nil {
		p.applied = nil
		errs = append(errs, fmt.Errorf("loading pf anchor %s: %w", p.anchor, err))
		return false, errors.Join(errs...)
	}
	p.applied = rules
	return true, errors.Join(errs...)
}

// Teardown undoes what vmlaned did to pf, as recorded in the state file at
// statePath (DefaultAnchor when there is none): it flushes the anchor's
// translation and filter rules (with -a, pfctl's flush reaches that anchor
// only), gives back the enable reference with `pfctl -X TOKEN` if pf still
// holds it, and removes the state file. pf itself stays as the other
// references holders want it. It returns one line per thing it did.
func Teardown(r commandRunner, statePath string) ([]string, error) {
	st, err := readState[pfState](statePath, "pf")
	if err != nil {
		return nil, err
	}
	anchor := st.Anchor
	if anchor == "" {
		anchor = DefaultAnchor
	}
	if err := ValidAnchor(anchor); err != nil {
		return nil, fmt.Errorf("state file %s: %w", statePath, err)
	}
	var done []string
	var errs []error
	for _, what := range []string{"nat", "rules"} {
		if _, err := r.Run("", "pfctl", "-a", anchor, "-F", what); err != nil {
			errs = append(errs, fmt.Errorf("flushing pf anchor %s (%s): %w", anchor, what, err))
		}
	}
	if len(errs) == 0 {
		done = append(done, "flushed pf anchor "+anchor)
	}
	if st.Token != "" {
		refs, err := r.Run("", "pfctl", "-s", "References")
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("pfctl -s References: %w", err))
		case st.TokenCreated.IsZero():
			done = append(done, "pf enable reference "+st.Token+" left alone: recorded without its creation time, it cannot be told from another holder's reuse of the value")
		case !heldBy(refs, st.Token, st.TokenCreated, now()):
			done = append(done, "pf enable reference "+st.Token+" already gone (or its value is another holder's now)")
		default:
			if _, err := r.Run("", "pfctl", "-X", st.Token); err != nil {
				errs = append(errs, fmt.Errorf("releasing pf reference %s: %w", st.Token, err))
			} else {
				done = append(done, "released pf enable reference "+st.Token)
			}
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(statePath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return done, errors.Join(errs...)
}
