// Package bridge sets up vmlane's node bridge (vmlane0 by default): it
// exists, is up, has the pinned MAC and MTU, and carries the gateway as its
// only address of that family. The CNI plugin runs it on every ADD and
// vmlaned at bootstrap, so either may come first. Linux only.
package bridge
