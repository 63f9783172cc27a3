// Package benchns gives the benchmark commands (cnibench, dhcpbench) the
// named network namespaces they run in, and a way to leave none behind.
//
// A command describes its names once, in a [Names]: the prefix of its
// namespaces, <prefix><pid>-<tag> or <prefix><pid>-<n>-<tag>, the prefix
// of its temp folder, <prefix><pid>-*, and the tag of its log lines. Each
// command has prefixes of its own, so that no run ever deletes what
// another command made. [Names.Main] runs a command, as root only, under
// a context that SIGINT and SIGTERM cancel; [Start] first sweeps what
// earlier runs left when they died before their cleanup (SIGKILL, a
// second ^C), then makes the run's temp folder; [Run.Create] makes
// namespaces, and [Run.Close] deletes them and the folder, on every way
// out, an interrupted one included, and checks that none of the run's
// namespaces is left.
//
// It is Linux only: on other systems the package is empty.
package benchns
