// `sluice run`, `sluice check-config` and `sluice version` (CONTRACT.md "Command line").
// Each returns the process exit code: 0 success, 2 usage or configuration error (every
// problem on stderr as FILE:LINE:COL: message), 3 runtime failure.
#pragma once

namespace sluice::cli {

int cmd_run(int argc, char** argv);
int cmd_check_config(int argc, char** argv);
int cmd_version(int argc, char** argv);

} // namespace sluice::cli
