// The operator's admin commands (CONTRACT.md "Command line"): `sluice approvals
// list|approve|deny`, `sluice flows`, `sluice kill`, `sluice revive`. Each talks to the
// admin API (CONTRACT.md "Admin API") of one or several `sluice run` replicas over HTTP/1.1
// (Beast client) with `Authorization: Bearer <token>`.
//
// Common options: `--admin URL` (repeatable and/or comma-separated; default
// $SLUICE_ADMIN_URL, else http://127.0.0.1:9901; a host name resolving to several addresses,
// e.g. a Kubernetes headless Service, means every address on the same port), `--token-file
// FILE` (else $SLUICE_ADMIN_TOKEN, else the default data dir's admin.token when the file
// exists), `--json`, `--timeout DURATION` (per replica, default 10s).
//
// Output: aligned tables on stdout (cut to the terminal's width when stdout is a
// terminal, full width otherwise; control characters from the data shown as \xNN), or JSON
// with `--json`. Errors on stderr; the token never appears in any output.
//
// argv[0] is the subcommand name. Each returns the process exit code: 0 success, 2 usage or
// input error (bad option or URL, unreadable token file, unknown approval id), 3 runtime
// failure (a replica unreachable, a refused token, any other API error; list/flows still
// print what the other replicas answered and kill/revive try every replica first).
#pragma once

namespace sluice::cli {

int cmd_approvals(int argc, char** argv);
int cmd_flows(int argc, char** argv);
int cmd_kill(int argc, char** argv);
int cmd_revive(int argc, char** argv);

} // namespace sluice::cli
