#include "cli_audit.hpp"

#include "sluice/proxy/audit_log.hpp"

#include <filesystem>
#include <iostream>
#include <string_view>
#include <vector>

namespace sluice::cli {

namespace {

constexpr const char* audit_usage =
    "usage: sluice audit verify [--partial] FILE...\n"
    "  FILEs in chain order: rotated files (audit.jsonl.*, which sort in order) then the\n"
    "  live file. --partial accepts a chain whose first record is not seq 1 (pruned).\n"
    "  Exchanges cut by a crash (a start record without its completion) are listed as\n"
    "  `cut:`; they do not fail the verification.\n";

// Exchanges whose start record has no completion: the process stopped (a crash, a
// SIGKILL) while they were in flight. Their decision is on record; bytes and duration
// are not. Informational: the chain itself is intact.
void print_cut(const proxy::audit_verify_result& r) {
    if (r.cut == 0)
        return;
    std::cout << "cut: " << r.cut
              << " exchange(s) started without a completion record (cut by a crash, or "
                 "still in flight in a live file), start seq";
    for (auto s : r.cut_seqs)
        std::cout << ' ' << s;
    if (r.cut > r.cut_seqs.size())
        std::cout << " ...";
    std::cout << "\n";
}

} // namespace

int cmd_audit(int argc, char** argv) {
    if (argc < 2 || std::string_view(argv[1]) != "verify") {
        std::cerr << audit_usage;
        return 2;
    }
    bool partial = false;
    std::vector<std::filesystem::path> files;
    for (int i = 2; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--partial")
            partial = true;
        else if (a == "-h" || a == "--help") {
            std::cout << audit_usage;
            return 0;
        } else if (a.starts_with("-") && a != "-") {
            std::cerr << "sluice audit verify: unknown option '" << a << "'\n" << audit_usage;
            return 2;
        } else
            files.emplace_back(a);
    }
    if (files.empty()) {
        std::cerr << audit_usage;
        return 2;
    }
    auto r = proxy::verify_audit_chain(files, partial);
    if (r.ok) {
        std::cout << "ok: " << r.records << " records in " << files.size() << " file(s), seq "
                  << r.first_seq << ".." << r.last_seq << ", last hash " << r.last_hash << "\n";
        print_cut(r);
        return 0;
    }
    if (r.what == "unreadable") {
        std::cerr << r.file << ": " << r.detail << "\n";
        return 2;
    }
    std::cerr << r.file << ":" << r.line << ": seq " << r.seq << ": " << r.what << ": " << r.detail
              << "\n";
    std::cerr << "chain verified up to seq " << r.last_seq << " (" << r.records
              << " records before the first bad one)\n";
    return 1;
}

} // namespace sluice::cli
