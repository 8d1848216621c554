// `sluice scan` and `sluice rules list|check` (CONTRACT.md "Command line"); argv[0] is the
// subcommand name ("scan" or "rules"). Each returns the process exit code: 0 clean / all
// checks pass, 1 findings / a rule check failed, 2 usage or input error (on stderr).
#pragma once

namespace sluice::cli {

int cmd_scan(int argc, char** argv);
int cmd_rules(int argc, char** argv);

} // namespace sluice::cli
