// Package kernel turns the errors a kernel gives for a feature it was
// built or booted without into errors that name the feature and the
// module to load. A node without the tun module fails TAP creation with
// "no such file or directory" (there is no /dev/net/tun); one without
// cls_u32 or act_mirred fails tc with "no such file or directory" or
// "operation not supported"; one without the bridge module fails with
// "operation not supported". None of those says what to do.
package kernel

import (
	"errors"
	"fmt"
	"syscall"
)

// Feature is a kernel feature vmlane needs and the module that provides
// it where it is not built in.
type Feature struct {
	What, Module string
}

// Features vmlane needs on a Linux node.
var (
	Bridge = Feature{"Linux bridges", "bridge"}
	Veth   = Feature{"veth pairs", "veth"}
	Tun    = Feature{"TAP devices (/dev/net/tun)", "tun"}
	// VM pods' TAP and veth are joined by an ingress qdisc on each with
	// a u32 filter whose action is mirred; the kernel does not say which
	// of the two modules a failed filter lacked.
	Ingress  = Feature{"the ingress qdisc", "sch_ingress"}
	Redirect = Feature{"the tc u32 classifier or the mirred action", "cls_u32 act_mirred"}
)

// MissingError is an error that the kernel's lack of a feature explains.
type MissingError struct {
	Feature Feature
	Err     error
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%v (this node's kernel lacks %s: load it with `modprobe %s`, and list it in /etc/modules-load.d/ to keep it)",
		e.Err, e.Feature.What, e.Feature.Module)
}

func (e *MissingError) Unwrap() error { return e.Err }

// missingErrnos are what the kernel answers for an unknown link kind,
// qdisc, classifier or action, or a missing device node.
var missingErrnos = []syscall.Errno{syscall.ENOENT, syscall.EOPNOTSUPP, syscall.ENODEV, syscall.EAFNOSUPPORT, syscall.EPROTONOSUPPORT}

// Explain returns err as a *MissingError for f when err is one of the
// errnos a missing feature gives, and err itself otherwise (nil stays nil).
func Explain(err error, f Feature) error {
	if err == nil {
		return nil
	}
	for _, e := range missingErrnos {
		if errors.Is(err, e) {
			return &MissingError{Feature: f, Err: err}
		}
	}
	return err
}
