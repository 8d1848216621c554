// The detector core from the command line: `sluice scan` scans files or stdin with the
// same rules and engine as the proxy; `sluice rules list|check` lists the rules and proves
// each one against its own examples. Output never contains secret bytes: findings carry
// offsets and fingerprints only.
#include "cli.hpp"

#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/embedded_rules.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/variants.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

constexpr std::string_view scan_usage =
    "usage: sluice scan [--no-variants] [--format jsonl|text] [--stats]\n"
    "                   [--rule-cost [N]] [--rule-cost-scope all|rules] [--rules FILE]...\n"
    "                   [PATH...|-]\n"
    "  Scans files (directories recursively) or stdin ('-' or no PATH) with the built-in\n"
    "  detectors plus any --rules files. One JSON object per finding on stdout:\n"
    "  path, rule, category, variant, offset, length, fingerprint, confidence (never the\n"
    "  secret). Decoded variants are scanned too (base64, hex, percent, JSON/JS escapes,\n"
    "  HTML entities, Unicode look-alikes, gzip/zlib/zstd inside base64 or hex), and a\n"
    "  gzip, zlib or zstd file is opened, as the proxy does for a request body sent\n"
    "  without Content-Encoding; for those, offset/length give the wrapped run in the\n"
    "  file and variant the chain. A git packfile is opened with libgit2 (deltas\n"
    "  resolved) and each finding in it gets a location: git:blob:<path>, git:tree:<dir>,\n"
    "  git:commit:<id> or git:tag:<name>; a pack that cannot be read whole is reported\n"
    "  as 'cannot be decoded whole (bad_encoding)' (exit 2). Archives (zip, tar, tar.gz,\n"
    "  tar.xz, 7z, ...) are opened with libarchive: location archive:<member>; an\n"
    "  encrypted or broken one is bad_encoding too.\n"
    "  Exit 0 clean, 1 findings, 2 usage or input error.\n"
    "  --stats        print bytes scanned, scan seconds, MB/s (scanning only), rule compile\n"
    "                 time, file read time and findings per rule to stderr\n"
    "  --no-variants  scan the raw bytes only\n"
    "  --rule-cost [N] after the scan, rank the N (default 10) most expensive rules: the\n"
    "                 input is scanned again with a database compiled without each rule\n"
    "                 in turn; a rule's cost is the scan time it adds (best of 3 timings\n"
    "                 each; the noise line gives the spread of the full database's timings).\n"
    "                 N is a positive whole number (--rule-cost 5 or --rule-cost=5; a file\n"
    "                 named 5 is ./5). Progress goes to stderr every 2 s.\n"
    "  --rule-cost-scope all|rules\n"
    "                 rank every rule (all, the default) or only those of the --rules files\n"
    "                 (rules: one database per rule of yours, still timed against the full\n"
    "                 database)\n"
    "  --rules FILE   add the rules of FILE (detectors/rules/*.yml schema); repeatable\n"
    "  A file whose decoded variants exceed 16x its size plus 1 MiB is reported as\n"
    "  'decode budget exceeded' (exit 2) after the findings made so far.\n";

constexpr std::string_view rules_usage =
    "usage: sluice rules list [--rules FILE]...\n"
    "       sluice rules check [FILE...]\n"
    "  list: id, category and name of every detector (built-in plus --rules files).\n"
    "  check: every example must match its own rule and every negative example must not;\n"
    "  with FILE, checks the rules of those files (compiled together with the built-in\n"
    "  rules), otherwise the built-in rules. Exit 0 all pass, 1 a check failed, 2 a file\n"
    "  does not load or compile.\n";

void print_diagnostics(const config::diagnostics& diags) {
    for (const auto& d : diags) {
        std::cerr << d.file << ':' << d.line << ':' << d.column << ": " << d.message << '\n';
    }
}

// Rules tagged with the file they came from, so `rules check` can name it.
struct sourced_rules {
    std::vector<detectors::rule> rules;
    std::vector<std::string> files;        // parallel to rules
    std::vector<config::rule_source> user; // --rules files: where each pattern is
};

bool load_builtin(sourced_rules& out) {
    bool ok = true;
    for (const auto& f : detectors::embedded_rule_files()) {
        const std::string name = "detectors/rules/" + std::string(f.name) + ".yml";
        auto rules = config::load_rules_string(f.text, name);
        if (!rules) {
            print_diagnostics(rules.error());
            ok = false;
            continue;
        }
        for (auto& r : *rules) {
            out.rules.push_back(std::move(r));
            out.files.push_back(name);
        }
    }
    return ok;
}

bool load_file(const std::string& file, sourced_rules& out) {
    auto rules = config::load_rules_file(file, &out.user);
    if (!rules) {
        print_diagnostics(rules.error());
        return false;
    }
    for (auto& r : *rules) {
        out.rules.push_back(std::move(r));
        out.files.push_back(file);
    }
    return true;
}

// Compile errors of a --rules file's rule (a regex Hyperscan or RE2 refuses) are printed
// at FILE:LINE:COL of its pattern. The built-in rules alone load their Hyperscan database
// from the build-time snapshot; with --rules files the key differs and they compile as
// usual.
std::shared_ptr<const detectors::ruleset> compile(std::vector<detectors::rule> rules,
                                                  const std::vector<config::rule_source>& user) {
    const auto snapshot = config::builtin_database_snapshot();
    auto rs = detectors::ruleset::compile(std::move(rules), &snapshot);
    if (!rs) {
        for (const auto& d : config::place_rule_errors(rs.error(), user, {"sluice", 0, 0, ""}))
            std::cerr << (d.line > 0 ? d.str() : "sluice: " + d.message) << '\n';
        return nullptr;
    }
    return *rs;
}

bool read_all(std::istream& in, std::string& out) {
    out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return !in.bad();
}

bool read_file(const fs::path& p, std::string& out) {
    std::ifstream in(p, std::ios::binary);
    if (!in)
        return false;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    if (!ec && size > 0) {
        out.resize(size);
        in.read(out.data(), static_cast<std::streamsize>(size));
        out.resize(static_cast<std::size_t>(in.gcount()));
        // Files that grow while being read (or report no size, like /proc) fall back.
        if (in.peek() != std::char_traits<char>::eof()) {
            std::string rest((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
            out += rest;
        }
        return !in.bad();
    }
    return read_all(in, out);
}

// The seconds one scan of every input takes with `rules` (variants as in the scan), best
// of `reps` timings so a scheduler hiccup does not rank a rule; -1 if they do not compile.
struct timed_scan {
    double best_s = -1;
    double worst_s = -1;
};

timed_scan time_rules(std::vector<detectors::rule> rules, const std::vector<std::string>& inputs,
                      const dlp::variant_options& vopts, int reps) {
    timed_scan t;
    auto rs = detectors::ruleset::compile(std::move(rules));
    if (!rs)
        return t;
    detectors::scanner scanner(*rs);
    dlp::variant_scanner vscanner(scanner, vopts);
    std::vector<dlp::variant_finding> findings;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = clock_type::now();
        for (const auto& data : inputs) {
            findings.clear();
            vscanner.reset();
            (void)vscanner.scan_body(data, {}, {}, findings);
        }
        const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
        t.best_s = t.best_s < 0 ? s : std::min(t.best_s, s);
        t.worst_s = std::max(t.worst_s, s);
    }
    return t;
}

// A positive whole number of at most 6 digits, or nothing ("-1", "5x", "" are refused).
std::optional<std::size_t> parse_count(std::string_view s) {
    if (s.empty() || s.size() > 6)
        return std::nullopt;
    std::size_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            return std::nullopt;
        v = v * 10 + static_cast<std::size_t>(c - '0');
    }
    if (v == 0)
        return std::nullopt;
    return v;
}

// Leave-one-out cost: what removing each rule saves. A rule's cost in the full database
// is not the cost of that rule alone (Hyperscan shares literal matching between rules),
// so the database is compiled without each rule and the same input scanned; the
// difference is the time the rule adds, confirmations and validators included.
// `candidates` are the indexes into `rules` to rank (every rule, or those of --rules files).
void print_rule_cost(const std::vector<detectors::rule>& rules,
                     const std::vector<std::size_t>& candidates,
                     const std::vector<std::string>& inputs, const dlp::variant_options& vopts,
                     std::size_t top) {
    constexpr int reps = 3;
    const auto t0 = clock_type::now();
    std::fprintf(stderr,
                 "rule cost: compiling and timing %zu databases (one without each of %zu "
                 "rules, plus the full one)\n",
                 candidates.size() + 1, candidates.size());
    const timed_scan all = time_rules(rules, inputs, vopts, reps);
    std::vector<std::pair<double, std::size_t>> cost;
    auto last_progress = clock_type::now();
    for (std::size_t done = 0; done < candidates.size(); ++done) {
        const std::size_t i = candidates[done];
        if (clock_type::now() - last_progress >= std::chrono::seconds(2)) {
            last_progress = clock_type::now();
            const double spent = std::chrono::duration<double>(last_progress - t0).count();
            std::fprintf(stderr, "rule cost: %zu/%zu rules, %.0f s, about %.0f s left\n", done,
                         candidates.size(), spent,
                         done > 0 ? spent / static_cast<double>(done) *
                                        static_cast<double>(candidates.size() - done)
                                  : 0.0);
        }
        std::vector<detectors::rule> without;
        without.reserve(rules.size() - 1);
        for (std::size_t k = 0; k < rules.size(); ++k)
            if (k != i)
                without.push_back(rules[k]);
        const timed_scan t = time_rules(std::move(without), inputs, vopts, reps);
        if (t.best_s >= 0)
            cost.emplace_back(all.best_s - t.best_s, i);
    }
    std::sort(cost.begin(), cost.end(), std::greater<>());
    std::fprintf(stderr,
                 "rule cost (leave-one-out, best of %d): full database %.3f ms per pass, noise "
                 "%.3f ms (spread of its timings); %zu databases compiled in %.1f s\n",
                 reps, all.best_s * 1e3, (all.worst_s - all.best_s) * 1e3, candidates.size() + 1,
                 std::chrono::duration<double>(clock_type::now() - t0).count());
    for (std::size_t i = 0; i < std::min(top, cost.size()); ++i) {
        const auto& r = rules[cost[i].second];
        std::fprintf(stderr, "  %2zu. %-40s %8.3f ms  %5.1f%%\n", i + 1, r.id.c_str(),
                     cost[i].first * 1e3,
                     all.best_s > 0 ? 100.0 * cost[i].first / all.best_s : 0.0);
    }
}

} // namespace

int cmd_scan(int argc, char** argv) {
    bool stats = false;
    bool text = false;
    bool variants = true;
    std::size_t rule_cost = 0;      // top N rules to rank; 0 = off
    bool cost_of_own_rules = false; // --rule-cost-scope rules
    std::vector<std::string> rule_files;
    std::vector<std::string> paths;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--help" || a == "-h") {
            std::cout << scan_usage;
            return 0;
        } else if (a == "--no-variants") {
            variants = false;
        } else if (a == "--stats") {
            stats = true;
        } else if (a == "--rule-cost" || a.starts_with("--rule-cost=")) {
            rule_cost = 10;
            if (a.starts_with("--rule-cost=")) {
                auto n = parse_count(a.substr(12));
                if (!n) {
                    std::cerr << "sluice scan: --rule-cost=N needs a positive whole number, not '"
                              << a.substr(12) << "'\n"
                              << scan_usage;
                    return 2;
                }
                rule_cost = *n;
            } else if (i + 1 < argc) {
                // `--rule-cost 5`: a following number is N, not a path to scan.
                const std::string_view next = argv[i + 1];
                if (auto n = parse_count(next)) {
                    rule_cost = *n;
                    ++i;
                } else if (next.starts_with('-') && next.size() > 1 &&
                           next.find_first_not_of("-0123456789") == std::string_view::npos) {
                    std::cerr << "sluice scan: --rule-cost N needs a positive whole number, not '"
                              << next << "'\n"
                              << scan_usage;
                    return 2;
                }
            }
        } else if (a == "--rule-cost-scope" && i + 1 < argc) {
            const std::string_view v = argv[++i];
            if (v != "all" && v != "rules") {
                std::cerr << "sluice scan: --rule-cost-scope must be all or rules\n" << scan_usage;
                return 2;
            }
            cost_of_own_rules = v == "rules";
        } else if (a == "--format" && i + 1 < argc) {
            const std::string_view f = argv[++i];
            if (f != "jsonl" && f != "text") {
                std::cerr << "sluice scan: --format must be jsonl or text\n" << scan_usage;
                return 2;
            }
            text = f == "text";
        } else if (a == "--rules" && i + 1 < argc) {
            rule_files.emplace_back(argv[++i]);
        } else if (a.size() > 1 && a.starts_with('-')) {
            std::cerr << "sluice scan: unknown or incomplete option " << a << '\n' << scan_usage;
            return 2;
        } else {
            paths.emplace_back(a);
        }
    }
    if (paths.empty())
        paths.emplace_back("-");

    sourced_rules loaded;
    bool ok = load_builtin(loaded);
    for (const auto& f : rule_files)
        ok = load_file(f, loaded) && ok;
    if (!ok)
        return 2;
    // --rule-cost recompiles without each rule, so it keeps the rules and the inputs.
    std::vector<detectors::rule> kept_rules;
    std::vector<std::size_t> cost_candidates;
    if (rule_cost > 0) {
        kept_rules = loaded.rules;
        for (std::size_t k = 0; k < loaded.rules.size(); ++k)
            if (!cost_of_own_rules || !loaded.files[k].starts_with("detectors/rules/"))
                cost_candidates.push_back(k);
        if (cost_candidates.empty()) {
            std::cerr << "sluice scan: --rule-cost-scope rules needs --rules FILE with rules\n";
            return 2;
        }
    }
    std::vector<std::string> kept_inputs;
    auto rs = compile(std::move(loaded.rules), loaded.user);
    if (!rs)
        return 2;
    detectors::scanner scanner(rs);
    // Files have no per-message limit: the relative budget (16x + 1 MiB) still bounds work.
    dlp::variant_options vopts;
    vopts.decoders = variants;
    vopts.budget.max_decoded_bytes = static_cast<std::size_t>(-1);
    vopts.budget.max_candidates = static_cast<std::size_t>(-1);
    dlp::variant_scanner vscanner(scanner, vopts);

    // Expand directories into their regular files, in a stable order.
    std::vector<std::string> inputs;
    int status = 0;
    for (const auto& p : paths) {
        std::error_code ec;
        if (p != "-" && fs::is_directory(p, ec)) {
            std::vector<std::string> found;
            for (auto it = fs::recursive_directory_iterator(
                     p, fs::directory_options::skip_permission_denied, ec);
                 !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
                if (it->is_regular_file(ec))
                    found.push_back(it->path().string());
            }
            if (ec) {
                std::cerr << "sluice scan: " << p << ": " << ec.message() << '\n';
                status = 2;
            }
            std::sort(found.begin(), found.end());
            inputs.insert(inputs.end(), found.begin(), found.end());
        } else {
            inputs.push_back(p);
        }
    }

    std::string data;
    std::vector<dlp::variant_finding> findings;
    std::map<std::string, std::size_t> per_rule;
    std::size_t bytes = 0, total_findings = 0;
    double read_s = 0, scan_s = 0;
    for (const auto& path : inputs) {
        const auto t0 = clock_type::now();
        const bool read_ok = path == "-" ? read_all(std::cin, data) : read_file(path, data);
        const auto t1 = clock_type::now();
        read_s += std::chrono::duration<double>(t1 - t0).count();
        if (!read_ok) {
            std::cerr << "sluice scan: " << path << ": cannot read\n";
            status = 2;
            continue;
        }
        findings.clear();
        vscanner.reset();
        const auto vst = vscanner.scan_body(data, {}, {}, findings);
        scan_s += std::chrono::duration<double>(clock_type::now() - t1).count();
        bytes += data.size();
        if (rule_cost > 0)
            kept_inputs.push_back(data);
        if (vst == dlp::variant_status::scanner_error) {
            std::cerr << "sluice scan: " << path << ": scanner failure\n";
            status = 2;
            continue;
        }
        if (vst == dlp::variant_status::bad_encoding) {
            // A git pack (or push) that cannot be read whole: cut short, corrupt or thin.
            std::cerr << "sluice scan: " << path << ": cannot be decoded whole (bad_encoding)\n";
            status = 2;
        } else if (vst != dlp::variant_status::ok) {
            std::cerr << "sluice scan: " << path << ": decode budget exceeded\n";
            status = 2; // the findings made before the budget ran out are still printed
        }
        const std::string_view shown =
            path == "-" ? std::string_view("<stdin>") : std::string_view(path);
        for (const auto& vf : findings) {
            const detectors::finding& f = vf.f;
            ++per_rule[f.rule_id];
            ++total_findings;
            if (text) {
                std::cout << shown << ':' << vf.offset << ": " << f.rule_id << " (" << f.category
                          << ") " << vf.variant
                          << (vf.location.empty() || vf.location == "body" ? "" : " in ")
                          << (vf.location == "body" ? "" : vf.location) << " length " << vf.length
                          << ' ' << f.fingerprint << " confidence " << f.confidence << '\n';
            } else {
                // Built by hand so confidence prints as 0.99, not Boost.JSON's 9.9E-1;
                // the only free-form string (the path) goes through the JSON serializer.
                char numbers[160];
                std::snprintf(
                    numbers, sizeof numbers,
                    ",\"offset\":%zu,\"length\":%zu,\"fingerprint\":\"%s\",\"confidence\":%.2f}",
                    vf.offset, vf.length, f.fingerprint.c_str(), f.confidence);
                std::cout << "{\"path\":" << boost::json::serialize(boost::json::string(shown))
                          << ",\"rule\":" << boost::json::serialize(boost::json::string(f.rule_id))
                          << ",\"category\":"
                          << boost::json::serialize(boost::json::string(f.category))
                          << ",\"variant\":"
                          << boost::json::serialize(boost::json::string(vf.variant));
                // Inside a container (a git pack's "git:blob:<path>"), where in it.
                if (!vf.location.empty() && vf.location != "body")
                    std::cout << ",\"location\":"
                              << boost::json::serialize(boost::json::string(vf.location));
                std::cout << numbers << '\n';
            }
        }
    }
    std::cout.flush();
    if (stats) {
        const double mb = static_cast<double>(bytes) / 1e6;
        std::fprintf(stderr,
                     "bytes scanned: %zu\nscan seconds: %.6f\nscan MB/s: %.1f\n"
                     "rule compile ms: %.1f (%zu rules%s)\nfile read seconds: %.6f\n"
                     "findings: %zu\n",
                     bytes, scan_s, scan_s > 0 ? mb / scan_s : 0.0, rs->compile_ms(),
                     rs->rules().size(),
                     rs->database_from_snapshot() ? ", Hyperscan database from the snapshot" : "",
                     read_s, total_findings);
        for (const auto& [rule, n] : per_rule)
            std::fprintf(stderr, "  %s: %zu\n", rule.c_str(), n);
    }
    if (rule_cost > 0)
        print_rule_cost(kept_rules, cost_candidates, kept_inputs, vopts, rule_cost);
    if (status != 0)
        return status;
    return total_findings > 0 ? 1 : 0;
}

int cmd_rules(int argc, char** argv) {
    if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
        std::cerr << rules_usage;
        return argc < 2 ? 2 : 0;
    }
    const std::string_view sub = argv[1];
    if (sub == "list") {
        sourced_rules loaded;
        bool ok = load_builtin(loaded);
        for (int i = 2; i < argc; ++i) {
            if (std::string_view(argv[i]) == "--rules" && i + 1 < argc) {
                ok = load_file(argv[++i], loaded) && ok;
            } else {
                std::cerr << "sluice rules list: unexpected argument " << argv[i] << '\n'
                          << rules_usage;
                return 2;
            }
        }
        if (!ok)
            return 2;
        for (const auto& r : loaded.rules)
            std::cout << r.id << '\t' << r.category << '\t' << r.name << '\n';
        return 0;
    }
    if (sub != "check") {
        std::cerr << "sluice rules: unknown subcommand " << sub << '\n' << rules_usage;
        return 2;
    }

    // The checked rules are compiled together with the built-ins (minus any the file
    // redefines) so a check also proves the file coexists with them in one database.
    sourced_rules builtin, checked;
    if (!load_builtin(builtin))
        return 2;
    if (argc == 2) {
        checked = builtin;
    } else {
        bool ok = true;
        for (int i = 2; i < argc; ++i)
            ok = load_file(argv[i], checked) && ok;
        if (!ok)
            return 2;
    }
    std::vector<detectors::rule> all = checked.rules;
    if (argc > 2) {
        for (const auto& r : builtin.rules) {
            bool redefined = false;
            for (const auto& c : checked.rules)
                redefined = redefined || c.id == r.id;
            if (!redefined)
                all.push_back(r);
        }
    }
    auto rs = compile(std::move(all), checked.user);
    if (!rs)
        return 2;
    detectors::scanner scanner(rs);

    std::size_t failures = 0, examples = 0;
    std::vector<detectors::finding> found;
    auto matches = [&](const std::string& text, const std::string& id) {
        found.clear();
        if (!scanner.scan(text, found))
            return false;
        for (const auto& f : found) {
            if (f.rule_id == id)
                return true;
        }
        return false;
    };
    for (std::size_t i = 0; i < checked.rules.size(); ++i) {
        const auto& r = checked.rules[i];
        const auto& file = checked.files[i];
        if (r.examples.empty()) {
            std::cout << file << ": rule " << r.id << ": FAIL no examples\n";
            ++failures;
        }
        for (std::size_t k = 0; k < r.examples.size(); ++k, ++examples) {
            if (!matches(r.examples[k], r.id)) {
                std::cout << file << ": rule " << r.id << ": FAIL example " << k + 1
                          << " does not match\n";
                ++failures;
            }
        }
        for (std::size_t k = 0; k < r.negative_examples.size(); ++k, ++examples) {
            if (matches(r.negative_examples[k], r.id)) {
                std::cout << file << ": rule " << r.id << ": FAIL negative example " << k + 1
                          << " matches\n";
                ++failures;
            }
        }
    }
    std::cout << checked.rules.size() << " rules, " << examples << " examples, " << failures
              << " failures\n";
    return failures == 0 ? 0 : 1;
}

} // namespace sluice::cli
