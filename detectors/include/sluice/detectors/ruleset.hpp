// A compiled, immutable set of rules: one Hyperscan block database (no start-of-match)
// plus one RE2 program per rule for confirmation. Build once, share as
// shared_ptr<const ruleset> across threads; scanning needs a per-thread `scanner`.
//
// The Hyperscan compile is the expensive part (about a second for the built-in rules,
// ten under ASan). A `database_snapshot` saved from an earlier compile of the same rules
// on the same kind of CPU lets `compile` load the database instead; anything that does not
// match exactly falls back to compiling, so the result is the same either way.
#pragma once

#include "sluice/detectors/rule.hpp"

#include <array>
#include <cstdint>
#include <expected>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sluice::detectors {

namespace detail {
struct ruleset_impl;
}

/// The target a Hyperscan database was compiled for: the fields of Hyperscan's
/// `hs_platform_info_t` (from `hs_populate_platform()`), copied so this header needs no
/// Hyperscan include. `tune` is an `HS_TUNE_FAMILY_*` value, `cpu_features` a mask of
/// `HS_CPU_FEATURES_*` bits.
struct database_platform {
    std::uint32_t tune = 0;
    std::uint64_t cpu_features = 0;
    std::uint64_t reserved1 = 0;
    std::uint64_t reserved2 = 0;
    friend bool operator==(const database_platform&, const database_platform&) = default;
};

/// SHA-256 that names what a snapshot's database was compiled from: `hs_version()`, the
/// block mode, and for every rule in order its id, pattern and final prefilter flag.
using snapshot_key = std::array<unsigned char, 32>;

/// A saved compile of one exact list of rules, viewed (not owned): typically static data
/// generated at build time (config's built-in rules) or a `saved_database` of this process.
/// `database` is `hs_serialize_database()` output; `prefilter` has one byte per rule, 1
/// when that rule went into the database with `HS_FLAG_PREFILTER` (after the compile's
/// retries), else 0.
struct database_snapshot {
    std::span<const unsigned char> database;
    std::span<const unsigned char> prefilter;
    snapshot_key key{};
    database_platform platform;
};

/// An owned snapshot, from `ruleset::save()`. `view()` is valid while this object lives.
struct saved_database {
    std::vector<unsigned char> database;
    std::vector<unsigned char> prefilter;
    snapshot_key key{};
    database_platform platform;
    database_snapshot view() const noexcept { return {database, prefilter, key, platform}; }
};

class ruleset {
public:
    /// Compiles `rules`. Errors (empty, duplicate id, pattern that neither Hyperscan nor
    /// RE2 accepts) come back as one message per problem, each naming the rule id.
    /// Never throws.
    ///
    /// With a `snapshot`, the Hyperscan database is loaded from it instead of compiled when
    /// all of these hold: its key equals the key of `rules` under this process's
    /// Hyperscan version and the snapshot's prefilter flags, `hs_populate_platform()` here
    /// equals `snapshot->platform`, and `hs_deserialize_database` accepts the bytes.
    /// Otherwise (other rules, e.g. built-in plus user rules; another CPU; another
    /// Hyperscan; damaged bytes) it compiles exactly as without one. Either way the
    /// per-rule checks and the RE2 confirmation programs are built as usual, and the
    /// ruleset finds the same things. The snapshot's bytes are only read during the call;
    /// concurrent compiles from one snapshot are safe.
    static std::expected<std::shared_ptr<const ruleset>, std::vector<std::string>>
    compile(std::vector<rule> rules, const database_snapshot* snapshot = nullptr);

    /// This ruleset's database as a snapshot for `compile` (`hs_serialize_database`, the
    /// final prefilter flags, the key and this machine's platform). Errors: a Hyperscan
    /// serialization failure, as a message. Never throws; safe to call from any thread.
    std::expected<saved_database, std::string> save() const;

    ~ruleset();
    ruleset(const ruleset&) = delete;
    ruleset& operator=(const ruleset&) = delete;

    std::span<const rule> rules() const noexcept;
    /// Longest max_width over all rules, in bytes: the tail a stream must carry.
    std::size_t max_width() const noexcept;
    /// Wall time `compile` took, in milliseconds (loading a snapshot included).
    double compile_ms() const noexcept;
    /// True when the Hyperscan database came from a snapshot rather than a compile.
    bool database_from_snapshot() const noexcept;

    const detail::ruleset_impl& impl() const noexcept { return *impl_; }

private:
    explicit ruleset(std::unique_ptr<detail::ruleset_impl> impl);
    std::unique_ptr<detail::ruleset_impl> impl_;
};

} // namespace sluice::detectors
