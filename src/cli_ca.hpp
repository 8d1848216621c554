// `sluice ca init [--dir DIR | --config FILE]` and `sluice ca path [--dir DIR | --config FILE]`
// (CONTRACT.md "Command line").
#pragma once

namespace sluice::cli {

/// Runs the `ca` subcommand; argv[0] is "ca". Returns the process exit code: 0 success
/// (including `init` when a CA already exists, which is left untouched), 2 usage error,
/// 3 runtime failure (message on stderr). Prints the CA certificate path on stdout.
int cmd_ca(int argc, char** argv);

} // namespace sluice::cli
