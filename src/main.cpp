// sluice: an egress firewall for AI agents. Dispatches the subcommands of
// CONTRACT.md "Command line"; each lives in its own cli_*.cpp.
#include "cli.hpp"
#include "cli_admin.hpp"
#include "cli_audit.hpp"
#include "cli_ca.hpp"
#include "cli_run.hpp"

#include <cstdio>
#include <exception>
#include <string_view>

namespace {

constexpr const char* usage = R"(usage: sluice <command> [options]

commands:
  run [--config FILE] [--data-dir DIR]   run the proxy (embedded default without --config);
                                         prints the export lines for the agent's shell
  check-config FILE                      validate a configuration; every problem as FILE:LINE:COL
  scan [--format jsonl|text] [--stats] [--no-variants] [--rules FILE]...
       [--rule-cost [N]] [--rule-cost-scope all|rules] [PATH...|-]
                                         scan files or stdin with the detector core;
                                         --rules adds your rule files, --rule-cost ranks
                                         the N slowest rules (`sluice scan --help`)
  rules list [--rules FILE] | rules check [FILE]
                                         list detectors / check every rule's examples
  ca init | ca path [--data-dir DIR]     create the local CA / print its certificate path
  audit verify [--partial] FILE...       verify the audit hash chain across (rotated) files
  approvals list | approve ID | deny ID  held requests: list, approve, deny (admin API)
  flows                                  live flows per identity and the kill switch state
  kill IDENTITY|--all | revive IDENTITY|--all
                                         kill switch: cut an identity off / lift it
  version                                versions of sluice, Hyperscan, OpenSSL, Boost

admin commands (approvals, flows, kill, revive) take --admin URL and find the token
with --token-file FILE, $SLUICE_ADMIN_TOKEN or --data-dir DIR (`sluice flows --help`).
DIR is the data dir: $XDG_DATA_HOME/sluice or ~/.local/share/sluice unless --data-dir.

exit codes: 0 success, 1 found something, 2 usage or input error, 3 runtime failure
)";

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fputs(usage, stderr);
        return 2;
    }
    std::string_view cmd = argv[1];
    int sub_argc = argc - 1;
    char** sub_argv = argv + 1;
    try {
        if (cmd == "run")
            return sluice::cli::cmd_run(sub_argc, sub_argv);
        if (cmd == "check-config")
            return sluice::cli::cmd_check_config(sub_argc, sub_argv);
        if (cmd == "scan")
            return sluice::cli::cmd_scan(sub_argc, sub_argv);
        if (cmd == "rules")
            return sluice::cli::cmd_rules(sub_argc, sub_argv);
        if (cmd == "ca")
            return sluice::cli::cmd_ca(sub_argc, sub_argv);
        if (cmd == "audit")
            return sluice::cli::cmd_audit(sub_argc, sub_argv);
        if (cmd == "approvals")
            return sluice::cli::cmd_approvals(sub_argc, sub_argv);
        if (cmd == "flows")
            return sluice::cli::cmd_flows(sub_argc, sub_argv);
        if (cmd == "kill")
            return sluice::cli::cmd_kill(sub_argc, sub_argv);
        if (cmd == "revive")
            return sluice::cli::cmd_revive(sub_argc, sub_argv);
        if (cmd == "version" || cmd == "--version")
            return sluice::cli::cmd_version(sub_argc, sub_argv);
        if (cmd == "help" || cmd == "--help" || cmd == "-h") {
            std::fputs(usage, stdout);
            return 0;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sluice: internal error: %s\n", e.what());
        return 3;
    }
    std::fprintf(stderr, "sluice: unknown command '%.*s'\n%s", static_cast<int>(cmd.size()),
                 cmd.data(), usage);
    return 2;
}
