#include "yaml_walker.hpp"

#include "env_expand.hpp"
#include "units.hpp"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <sstream>
#include <vector>

namespace sluice::config {

std::string diagnostic::str() const {
    if (line <= 0) {
        return file + ": " + message;
    }
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

diagnostic walker::at(const YAML::Mark& m, std::string msg) const {
    if (unplaced_ == unplaced::file_start) {
        // yaml-cpp marks are 0-based; -1 means "no position" (e.g. an empty document).
        return {file_, m.line >= 0 ? m.line + 1 : 1, m.column >= 0 ? m.column + 1 : 1,
                std::move(msg)};
    }
    if (m.is_null() || m.line < 0) {
        return {file_, 0, 0, std::move(msg)};
    }
    return {file_, m.line + 1, m.column + 1, std::move(msg)};
}

std::optional<walker::map_view> walker::map(const YAML::Node& n, std::string_view what,
                                            std::initializer_list<std::string_view> allowed,
                                            bool null_ok) {
    map_view v;
    v.mark = n.Mark();
    if (n.IsNull() && null_ok) {
        return v;
    }
    if (!n.IsMap()) {
        error(n, "expected a mapping for " + std::string(what));
        return std::nullopt;
    }
    for (const auto& kv : n) {
        // Copies, not references: yaml-cpp's iterator hands out a temporary pair, and a
        // reference into it dangles once the statement ends.
        const YAML::Node key = kv.first;
        if (!key.IsScalar()) {
            error(key, "keys in " + std::string(what) + " must be plain strings");
            continue;
        }
        const std::string& k = key.Scalar();
        if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
            std::string msg =
                "unknown key '" + k + "' in " + std::string(what) + " (expected one of:";
            for (auto a : allowed) {
                msg += " ";
                msg += a;
            }
            error(key, msg + ")");
            continue;
        }
        if (v.entries.contains(k)) {
            error(key, "duplicate key '" + k + "' in " + std::string(what));
            continue;
        }
        v.entries.emplace(k, std::make_pair(key, YAML::Node(kv.second)));
    }
    return v;
}

std::optional<std::string> walker::expand(const std::string& raw, const YAML::Mark& m) {
    std::vector<std::string> problems;
    auto out = expand_env(raw, problems);
    for (auto& p : problems) {
        error(m, std::move(p));
    }
    return out;
}

std::optional<std::string> walker::str(const YAML::Node& n, std::string_view what,
                                       bool allow_empty) {
    if (!n.IsScalar()) {
        error(n, n.IsNull() ? std::string(what) + " needs a value"
                            : "expected a string for " + std::string(what));
        return std::nullopt;
    }
    auto v = expand(n.Scalar(), n.Mark());
    if (v && v->empty() && !allow_empty) {
        error(n, std::string(what) + " must not be empty");
        return std::nullopt;
    }
    return v;
}

std::string walker::shown(const YAML::Node& n) {
    std::string s = n.IsScalar() ? n.Scalar() : std::string("<non-scalar>");
    if (s.size() > 48) {
        s = s.substr(0, 45) + "...";
    }
    return "'" + s + "'";
}

std::optional<std::uint64_t> walker::u64(const YAML::Node& n, std::string_view what,
                                         std::uint64_t max) {
    auto s = str(n, what);
    if (!s) {
        return std::nullopt;
    }
    auto v = parse_u64(*s);
    if (!v || *v > max) {
        error(n, "invalid " + std::string(what) + " " + shown(n) + " (expected an integer 0.." +
                     std::to_string(max) + ")");
        return std::nullopt;
    }
    return v;
}

std::optional<bool> walker::boolean(const YAML::Node& n, std::string_view what) {
    auto s = str(n, what);
    if (!s) {
        return std::nullopt;
    }
    if (*s == "true") {
        return true;
    }
    if (*s == "false") {
        return false;
    }
    error(n, "invalid " + std::string(what) + " " + shown(n) + " (expected true or false)");
    return std::nullopt;
}

std::optional<std::size_t> walker::size(const YAML::Node& n, std::string_view what) {
    auto s = str(n, what);
    if (!s) {
        return std::nullopt;
    }
    auto v = parse_size(*s);
    if (!v) {
        error(n, "invalid size " + shown(n) + " for " + std::string(what) +
                     " (e.g. 512, 64KiB, 16MiB)");
    }
    return v;
}

std::optional<std::chrono::milliseconds> walker::duration(const YAML::Node& n,
                                                          std::string_view what) {
    auto s = str(n, what);
    if (!s) {
        return std::nullopt;
    }
    auto v = parse_duration(*s);
    if (!v) {
        error(n, "invalid duration " + shown(n) + " for " + std::string(what) +
                     " (e.g. 500ms, 30s, 5m)");
    }
    return v;
}

std::optional<std::string> walker::one_of(const YAML::Node& n, std::string_view what,
                                          std::initializer_list<std::string_view> choices) {
    auto s = str(n, what);
    if (!s) {
        return std::nullopt;
    }
    if (std::find(choices.begin(), choices.end(), *s) != choices.end()) {
        return s;
    }
    std::string msg = "invalid " + std::string(what) + " " + shown(n) + " (expected";
    bool first = true;
    for (auto c : choices) {
        msg += first ? " " : " | ";
        msg += c;
        first = false;
    }
    error(n, msg + ")");
    return std::nullopt;
}

namespace {

// Counts documents with a bare event handler instead of YAML::LoadAll: on some malformed
// input yaml-cpp 0.7's parser reports empty documents forever, and LoadAll loops until
// memory runs out (found by fuzz/config_fuzz.cpp).
class document_counter final : public YAML::EventHandler {
public:
    int count = 0;
    YAML::Mark second;
    void OnDocumentStart(const YAML::Mark& m) override {
        if (++count == 2) {
            second = m;
        }
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

} // namespace

std::optional<YAML::Mark> find_second_document(std::string_view text) {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    document_counter counter;
    for (int i = 0; i < 2 && parser.HandleNextDocument(counter); ++i) {
    }
    if (counter.count >= 2) {
        return counter.second;
    }
    return std::nullopt;
}

} // namespace sluice::config
