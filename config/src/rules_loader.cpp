#include "sluice/config/rules_loader.hpp"

#include "sluice/detectors/embedded_rules.hpp"
#include "sluice/detectors/text.hpp"
#include "yaml_walker.hpp"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

namespace sluice::config {

namespace {

using text::str_cat;

// The rule schema over the shared walker (yaml_walker.hpp); problems without a position
// are reported at 1:1, as callers of the rules loader expect.
struct reader {
    walker w;
    std::vector<rule_source>* sources = nullptr;

    void error(const YAML::Mark& m, std::string message) { w.error(m, std::move(message)); }

    bool string_field(const YAML::Node& n, std::string_view key, std::string& out) {
        if (!n.IsScalar()) {
            error(n.Mark(), str_cat(key, ": expected a string"));
            return false;
        }
        out = n.Scalar();
        return true;
    }

    void string_list(const YAML::Node& n, std::string_view key, std::vector<std::string>& out) {
        if (n.IsNull())
            return;
        if (!n.IsSequence()) {
            error(n.Mark(), str_cat(key, ": expected a list of strings"));
            return;
        }
        for (const auto& item : n) {
            if (!item.IsScalar()) {
                error(item.Mark(), str_cat(key, ": expected a string"));
                continue;
            }
            out.push_back(item.Scalar());
        }
    }

    void parse_rule(const YAML::Node& n, std::vector<detectors::rule>& out,
                    std::map<std::string, YAML::Mark, std::less<>>& seen) {
        if (!n.IsMap()) {
            error(n.Mark(), "rule: expected a mapping");
            return;
        }
        detectors::rule r;
        YAML::Mark pattern_mark = n.Mark();
        bool has_id = false, has_pattern = false, has_name = false, has_category = false;
        for (const auto& kv : n) {
            const std::string key = kv.first.as<std::string>();
            const YAML::Node& v = kv.second;
            if (key == "id") {
                has_id = string_field(v, key, r.id);
            } else if (key == "name") {
                has_name = string_field(v, key, r.name);
            } else if (key == "category") {
                has_category = string_field(v, key, r.category);
            } else if (key == "pattern") {
                has_pattern = string_field(v, key, r.pattern);
                pattern_mark = v.Mark();
            } else if (key == "validator") {
                if (!v.IsNull())
                    string_field(v, key, r.validator);
            } else if (key == "confidence") {
                double c = 0;
                if (!v.IsScalar() || !YAML::convert<double>::decode(v, c) || c < 0 || c > 1) {
                    error(v.Mark(), "confidence: expected a number within 0..1");
                } else {
                    r.confidence = c;
                }
            } else if (key == "max_width") {
                unsigned long w = 0;
                if (!v.IsScalar() || !YAML::convert<unsigned long>::decode(v, w) || w == 0 ||
                    w > 65536) {
                    error(v.Mark(), "max_width: expected a byte count within 1..65536");
                } else {
                    r.max_width = w;
                }
            } else if (key == "keywords") {
                string_list(v, key, r.keywords);
            } else if (key == "references") {
                string_list(v, key, r.references);
            } else if (key == "examples") {
                string_list(v, key, r.examples);
            } else if (key == "negative_examples") {
                string_list(v, key, r.negative_examples);
            } else {
                error(kv.first.Mark(), str_cat("unknown key \"", key, "\" in rule"));
            }
        }
        if (!has_id || r.id.empty()) {
            error(n.Mark(), "rule: missing id");
            return;
        }
        if (!has_pattern || r.pattern.empty())
            error(n.Mark(), str_cat("rule ", r.id, ": missing pattern"));
        if (!has_name || r.name.empty())
            error(n.Mark(), str_cat("rule ", r.id, ": missing name"));
        if (!has_category || r.category.empty()) {
            error(n.Mark(), str_cat("rule ", r.id, ": missing category"));
        }
        if (auto [it, fresh] = seen.emplace(r.id, n.Mark()); !fresh) {
            error(n.Mark(), str_cat("rule ", r.id, ": duplicate id (first defined at line ",
                                    it->second.line + 1, ")"));
            return;
        }
        if (sources)
            sources->push_back(rule_source{r.id, w.at(pattern_mark, {})});
        out.push_back(std::move(r));
    }
};

std::expected<std::vector<detectors::rule>, diagnostics>
parse(std::string_view yaml, std::string_view name, std::vector<rule_source>* sources) {
    std::vector<rule_source> found;
    reader rd{walker(std::string(name), walker::unplaced::file_start), &found};
    std::vector<detectors::rule> rules;
    try {
        const YAML::Node root = YAML::Load(std::string(yaml));
        YAML::Node list;
        if (root.IsSequence()) {
            list = root;
        } else if (root.IsMap()) {
            for (const auto& kv : root) {
                const std::string key = kv.first.as<std::string>();
                if (key == "rules") {
                    list = kv.second;
                } else {
                    rd.error(kv.first.Mark(),
                             str_cat("unknown key \"", key, "\" (expected \"rules\")"));
                }
            }
            if (!list)
                rd.error(root.Mark(), "missing \"rules\"");
        } else {
            rd.error(root.Mark(), "expected a mapping with a \"rules\" list");
        }
        if (list && !list.IsSequence()) {
            rd.error(list.Mark(), "rules: expected a list");
        } else if (list) {
            std::map<std::string, YAML::Mark, std::less<>> seen;
            for (const auto& item : list)
                rd.parse_rule(item, rules, seen);
        }
    } catch (const YAML::Exception& e) {
        rd.error(e.mark, e.msg);
    }
    if (!rd.w.diags().empty())
        return std::unexpected(std::move(rd.w.diags()));
    if (sources)
        sources->insert(sources->end(), found.begin(), found.end());
    return rules;
}

} // namespace

std::expected<std::vector<detectors::rule>, diagnostics>
load_rules_string(std::string_view yaml, std::string_view name, std::vector<rule_source>* sources) {
    try {
        return parse(yaml, name, sources);
    } catch (const std::exception& e) {
        return std::unexpected(diagnostics{diagnostic{std::string(name), 1, 1, e.what()}});
    }
}

diagnostics place_rule_errors(const std::vector<std::string>& errors,
                              const std::vector<rule_source>& sources, const diagnostic& fallback) {
    diagnostics out;
    for (const auto& e : errors) {
        diagnostic d = fallback;
        d.message = fallback.message.empty() ? e : fallback.message + e;
        for (const auto& s : sources) {
            const std::string prefix = str_cat("rule ", s.id, ": ");
            if (std::string_view(e).starts_with(prefix)) {
                d = s.pattern_at;
                d.message = e;
                break;
            }
        }
        out.push_back(std::move(d));
    }
    return out;
}

std::expected<std::vector<detectors::rule>, diagnostics>
load_rules_file(const std::filesystem::path& file, std::vector<rule_source>* sources) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        return std::unexpected(
            diagnostics{diagnostic{file.string(), 1, 1, "cannot read rule file"}});
    }
    std::ostringstream text;
    text << in.rdbuf();
    return load_rules_string(text.str(), file.string(), sources);
}

std::expected<std::vector<detectors::rule>, diagnostics> builtin_rules() {
    std::vector<detectors::rule> all;
    diagnostics diags;
    std::map<std::string, std::string, std::less<>> owner; // rule id -> file
    for (const auto& f : detectors::embedded_rule_files()) {
        const std::string name = str_cat("detectors/rules/", f.name, ".yml");
        auto rules = load_rules_string(f.text, name);
        if (!rules) {
            diags.insert(diags.end(), rules.error().begin(), rules.error().end());
            continue;
        }
        for (auto& r : *rules) {
            if (auto [it, fresh] = owner.emplace(r.id, name); !fresh) {
                diags.push_back(diagnostic{
                    name, 1, 1,
                    str_cat("rule ", r.id, ": duplicate id (also in ", it->second, ")")});
                continue;
            }
            all.push_back(std::move(r));
        }
    }
    if (!diags.empty())
        return std::unexpected(std::move(diags));
    return all;
}

} // namespace sluice::config
