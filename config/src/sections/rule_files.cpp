// `rule_files` (user detector rules) and the checks across the whole file that need every
// section read first: identity, credential, detector and rule references.
#include "loader.hpp"

#include "sluice/config/rules_loader.hpp"

#include <set>
#include <utility>

namespace sluice::config {

// User rule files (same schema as detectors/rules/*.yml), added to the built-in rules;
// relative paths resolve against the configuration file's folder.
void loader::rule_files(const YAML::Node& n) {
    w_.seq(n, "rule_files", [&](const YAML::Node& e) {
        if (auto f = w_.str(e, "rule_files")) {
            fs::path p(*f);
            rule_files_.push_back({p.is_relative() ? base_dir_ / p : p, e.Mark()});
        }
    });
}

void loader::cross_checks() {
    for (const auto& r : refs_) {
        if (!identity_names_.contains(r.name)) {
            w_.error(r.mark, r.what + " '" + r.name + "' is not a defined identity");
        }
    }
    for (const auto& r : credential_refs_) {
        if (!credential_names_.contains(r.name)) {
            w_.error(r.mark, r.what + " '" + r.name + "' is not a defined credential");
        }
    }
    const auto builtin = builtin_ruleset();
    if (!builtin) {
        for (const auto& d : builtin.error()) {
            w_.diags().push_back(d);
        }
        return; // rule references cannot be checked without rules; the errors above say why
    }
    s_.rules = *builtin;
    if (!rule_files_.empty() && !user_rules()) {
        return;
    }
    std::set<std::string, std::less<>> ids;
    std::set<std::string, std::less<>> categories;
    for (const auto& r : s_.rules->rules()) {
        ids.insert(r.id);
        categories.insert(r.category);
    }
    for (const auto& r : detector_refs_) {
        if (r.name != "all" && !ids.contains(r.name) && !categories.contains(r.name)) {
            w_.error(r.mark,
                     "unknown detector '" + r.name + "' (expected 'all', a rule id or a category)");
        }
    }
    for (const auto& r : rule_refs_) {
        if (!ids.contains(r.name)) {
            w_.error(r.mark, r.what + " '" + r.name + "' is not a known rule id");
        }
    }
}

// Built-in rules plus every `rule_files` entry, compiled into one ruleset. Problems in
// a rule file carry that file's line and column; compile problems point at the entry.
// Rule files that add no rules leave the shared built-in ruleset in place.
bool loader::user_rules() {
    auto all = builtin_rules();
    if (!all) {
        return false; // already reported through builtin_ruleset()
    }
    const std::size_t builtin_count = all->size();
    bool ok = true;
    std::vector<rule_source> sources; // where each user rule's pattern is
    for (const auto& f : rule_files_) {
        auto loaded = load_rules_file(f.path, &sources);
        if (!loaded) {
            for (auto& d : loaded.error()) {
                w_.diags().push_back(std::move(d));
            }
            ok = false;
            continue;
        }
        for (auto& r : *loaded) {
            all->push_back(std::move(r));
        }
    }
    if (!ok) {
        return false;
    }
    if (all->size() == builtin_count) {
        return true;
    }
    auto compiled = detectors::ruleset::compile(std::move(*all));
    if (!compiled) {
        // A bad pattern in a user rule is reported at its FILE:LINE:COL; anything else
        // at the rule_files entry.
        const diagnostic entry = w_.at(rule_files_.front().mark, "rule_files: ");
        for (auto& d : place_rule_errors(compiled.error(), sources, entry)) {
            w_.diags().push_back(std::move(d));
        }
        return false;
    }
    s_.rules = std::move(*compiled);
    return true;
}

} // namespace sluice::config
