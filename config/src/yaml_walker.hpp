// The YAML walker shared by the settings loader (settings.cpp, sections/) and the rules
// loader (rules_loader.cpp): internal to config/. It turns yaml-cpp nodes into typed values
// and records every problem as a diagnostic at the node's FILE:LINE:COL (yaml-cpp marks are
// 0-based; diagnostics are 1-based). Nothing stops at the first problem: each reader records
// a diagnostic and returns nullopt, and callers carry on, so one run shows every mistake.
// Not thread safe: one walker per load.
#pragma once

#include "sluice/config/settings.hpp"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::config {

class walker {
public:
    /// Where a problem without a position (an empty document, a null mark) is reported.
    enum class unplaced {
        no_position, ///< line 0: printed as "FILE: message" (the settings loader)
        file_start,  ///< 1:1 (the rules loader, whose callers expect a position)
    };

    explicit walker(std::string file, unplaced u = unplaced::no_position)
        : file_(std::move(file))
        , unplaced_(u) {}

    diagnostics& diags() { return diags_; }
    const std::string& file() const { return file_; }

    /// A diagnostic in this walker's file at `m` (1-based), without recording it.
    diagnostic at(const YAML::Mark& m, std::string msg) const;
    void error(const YAML::Mark& m, std::string msg) { diags_.push_back(at(m, std::move(msg))); }
    void error(const YAML::Node& n, std::string msg) { error(n.Mark(), std::move(msg)); }

    /// A mapping's entries by key, after checking the key set.
    struct map_view {
        YAML::Mark mark;
        std::map<std::string, std::pair<YAML::Node, YAML::Node>, std::less<>> entries;
        const YAML::Node* get(std::string_view k) const {
            auto it = entries.find(k);
            return it == entries.end() ? nullptr : &it->second.second;
        }
        YAML::Mark key_mark(std::string_view k) const {
            auto it = entries.find(k);
            return it == entries.end() ? mark : it->second.first.Mark();
        }
    };

    /// Reports a non-mapping (unless null and `null_ok`), non-scalar keys, duplicate keys
    /// and keys not in `allowed`; nullopt only when `n` is not a mapping.
    std::optional<map_view> map(const YAML::Node& n, std::string_view what,
                                std::initializer_list<std::string_view> allowed,
                                bool null_ok = false);

    /// A scalar with `${VAR}` expanded (env_expand.hpp); empty is an error unless
    /// `allow_empty`.
    std::optional<std::string> str(const YAML::Node& n, std::string_view what,
                                   bool allow_empty = false);
    /// An integer 0..max.
    std::optional<std::uint64_t> u64(const YAML::Node& n, std::string_view what, std::uint64_t max);
    /// `true` or `false`.
    std::optional<bool> boolean(const YAML::Node& n, std::string_view what);
    /// A size in bytes (`parse_size`).
    std::optional<std::size_t> size(const YAML::Node& n, std::string_view what);
    /// A duration (`parse_duration`).
    std::optional<std::chrono::milliseconds> duration(const YAML::Node& n, std::string_view what);
    /// One of `choices`, exactly as written.
    std::optional<std::string> one_of(const YAML::Node& n, std::string_view what,
                                      std::initializer_list<std::string_view> choices);

    /// A sequence; a single scalar is NOT accepted as a one-element list, to keep the
    /// schema unambiguous. Calls `each` per element; null is an empty list.
    template <class F>
    void seq(const YAML::Node& n, std::string_view what, F&& each) {
        if (n.IsNull()) {
            return;
        }
        if (!n.IsSequence()) {
            error(n, "expected a list for " + std::string(what));
            return;
        }
        for (const auto& item : n) {
            each(item);
        }
    }

    /// Quoted form of the value as written in the file (never the expanded text, which may
    /// carry an environment secret), cut short.
    static std::string shown(const YAML::Node& n);

private:
    std::optional<std::string> expand(const std::string& raw, const YAML::Mark& m);

    std::string file_;
    unplaced unplaced_;
    diagnostics diags_;
};

/// The position of a second YAML document in `text`, if any (one document is allowed).
/// Reads at most two documents, so it is bounded even on input that makes yaml-cpp 0.7
/// report empty documents forever. Throws YAML::ParserException for a syntax error.
std::optional<YAML::Mark> find_second_document(std::string_view text);

} // namespace sluice::config
