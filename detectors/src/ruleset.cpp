#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/text.hpp"

#include "detail/ruleset_impl.hpp"
#include "detail/thread_scratch.hpp"
#include "sluice/detectors/validators.hpp"

#include <openssl/evp.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>

namespace sluice::detectors {

namespace {

using text::str_cat;

// Unbounded patterns (a `+` or `*`) get this much context for confirmation. A rule can
// set max_width explicitly when it needs more; prefix-anchored bounded patterns never
// reach it.
constexpr std::size_t unbounded_width_cap = 4096;

// Byte semantics in both engines: Hyperscan without HS_FLAG_UTF8 and RE2 in Latin-1
// see the same bytes, so a Hyperscan hit on binary input confirms the same way.
RE2::Options confirm_options() {
    RE2::Options o;
    o.set_encoding(RE2::Options::EncodingLatin1);
    o.set_log_errors(false);
    o.set_max_mem(32 << 20);
    return o;
}

// RE2 caps counted repetition at 1000; Hyperscan does not. For confirmation, a bound
// above that becomes open-ended ({m,n} -> {m,}): the window is already limited to the
// width Hyperscan computed from the exact pattern, and Hyperscan has already proven a
// match ends at the hit. Returns nullopt-like empty string if a minimum exceeds the cap.
std::string re2_compatible(const std::string& pattern, bool& ok) {
    ok = true;
    std::string out;
    out.reserve(pattern.size());
    bool in_class = false;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            out += c;
            out += pattern[++i];
            continue;
        }
        if (in_class) {
            if (c == ']')
                in_class = false;
            out += c;
            continue;
        }
        if (c == '[') {
            in_class = true;
            out += c;
            // A ']' right after '[' or '[^' is a literal member of the class.
            if (i + 1 < pattern.size() && pattern[i + 1] == '^')
                out += pattern[++i];
            if (i + 1 < pattern.size() && pattern[i + 1] == ']')
                out += pattern[++i];
            continue;
        }
        if (c == '{') {
            const auto close = pattern.find('}', i);
            if (close != std::string::npos) {
                const std::string body = pattern.substr(i + 1, close - i - 1);
                const auto comma = body.find(',');
                auto all_digits = [](std::string_view d) {
                    return !d.empty() &&
                           d.find_first_not_of("0123456789") == std::string_view::npos;
                };
                const std::string lo = body.substr(0, comma);
                const std::string hi = comma == std::string::npos ? "" : body.substr(comma + 1);
                if (all_digits(lo) &&
                    (comma == std::string::npos || hi.empty() || all_digits(hi))) {
                    if (lo.size() > 4 || std::stoul(lo) > 1000)
                        ok = false;
                    if (comma != std::string::npos && !hi.empty() &&
                        (hi.size() > 4 || std::stoul(hi) > 1000)) {
                        out += "{" + lo + ",}";
                        i = close;
                        continue;
                    }
                }
            }
        }
        out += c;
    }
    return out;
}

// The key commits to everything hs_compile_multi is given (each expression, its flags and
// its id, which is its index) and to the Hyperscan that compiles it. Ids are included so
// a snapshot never pairs one rule's database entry with another rule's confirmation.
// Every field is length-prefixed, so no two rule lists serialize alike.
std::optional<snapshot_key> key_of(std::span<const rule> rules,
                                   std::span<const unsigned char> prefilter) {
    std::string text = "sluice ruleset snapshot 1";
    auto add_size = [&text](std::uint64_t n) {
        for (int b = 0; b < 8; ++b)
            text += static_cast<char>((n >> (8 * b)) & 0xff);
    };
    auto add = [&](std::string_view field) {
        add_size(field.size());
        text += field;
    };
    add(hs_version());
    add_size(HS_MODE_BLOCK);
    add_size(rules.size());
    for (std::size_t i = 0; i < rules.size(); ++i) {
        add(rules[i].id);
        add(rules[i].pattern);
        text += static_cast<char>(prefilter[i]);
    }
    snapshot_key key{};
    unsigned int len = 0;
    if (EVP_Digest(text.data(), text.size(), key.data(), &len, EVP_sha256(), nullptr) != 1 ||
        len != key.size())
        return std::nullopt;
    return key;
}

std::optional<database_platform> this_platform() {
    hs_platform_info_t p{};
    if (hs_populate_platform(&p) != HS_SUCCESS)
        return std::nullopt;
    return database_platform{p.tune, p.cpu_features, p.reserved1, p.reserved2};
}

// Takes the database from `s` when it was compiled from exactly these rules, by this
// Hyperscan, for this platform; false leaves `impl` as it was, to be compiled.
bool load_snapshot(const database_snapshot& s, std::span<const rule> rules,
                   detail::ruleset_impl& impl) {
    if (s.database.empty() || s.prefilter.size() != rules.size())
        return false;
    for (std::size_t i = 0; i < rules.size(); ++i) {
        // The compile only ever adds prefilter flags, never removes one that
        // hs_expression_info made necessary.
        if (s.prefilter[i] > 1 || (impl.compiled[i].prefilter && s.prefilter[i] == 0))
            return false;
    }
    const auto key = key_of(rules, s.prefilter);
    const auto here = this_platform();
    if (!key || *key != s.key || !here || *here != s.platform)
        return false;
    hs_database_t* db = nullptr;
    if (hs_deserialize_database(reinterpret_cast<const char*>(s.database.data()), s.database.size(),
                                &db) != HS_SUCCESS)
        return false;
    impl.db.reset(db);
    for (std::size_t i = 0; i < rules.size(); ++i)
        impl.compiled[i].prefilter = s.prefilter[i] != 0;
    impl.from_snapshot = true;
    return true;
}

} // namespace

ruleset::ruleset(std::unique_ptr<detail::ruleset_impl> impl)
    : impl_(std::move(impl)) {}
ruleset::~ruleset() = default;

std::span<const rule> ruleset::rules() const noexcept {
    return impl_->rules;
}
std::size_t ruleset::max_width() const noexcept {
    return impl_->max_width;
}
double ruleset::compile_ms() const noexcept {
    return impl_->compile_ms;
}
bool ruleset::database_from_snapshot() const noexcept {
    return impl_->from_snapshot;
}

std::expected<saved_database, std::string> ruleset::save() const try {
    struct free_bytes {
        void operator()(char* p) const noexcept { std::free(p); }
    };
    char* raw = nullptr;
    std::size_t size = 0;
    if (hs_serialize_database(impl_->db.get(), &raw, &size) != HS_SUCCESS)
        return std::unexpected(std::string("ruleset: cannot serialize the Hyperscan database"));
    const std::unique_ptr<char, free_bytes> bytes(raw);
    saved_database out;
    out.database.resize(size);
    std::memcpy(out.database.data(), bytes.get(), size);
    for (const auto& c : impl_->compiled)
        out.prefilter.push_back(c.prefilter ? 1 : 0);
    const auto key = key_of(impl_->rules, out.prefilter);
    const auto platform = this_platform();
    if (!key || !platform)
        return std::unexpected(std::string("ruleset: cannot compute the snapshot key"));
    out.key = *key;
    out.platform = *platform;
    return out;
} catch (const std::exception& e) {
    return std::unexpected(std::string("ruleset: ") + e.what());
}

std::expected<std::shared_ptr<const ruleset>, std::vector<std::string>>
ruleset::compile(std::vector<rule> rules, const database_snapshot* snapshot) try {
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::string> errors;
    if (rules.empty()) {
        return std::unexpected(std::vector<std::string>{"ruleset: no rules"});
    }
    auto impl = std::make_unique<detail::ruleset_impl>();
    impl->compiled.resize(rules.size());
    std::set<std::string, std::less<>> ids;
    for (std::size_t i = 0; i < rules.size(); ++i) {
        const rule& r = rules[i];
        auto& c = impl->compiled[i];
        const std::string& id = r.id.empty() ? str_cat("#", i) : r.id;
        if (r.id.empty())
            errors.push_back(str_cat("rule ", id, ": empty id"));
        if (!ids.insert(r.id).second)
            errors.push_back(str_cat("rule ", id, ": duplicate id"));
        if (r.pattern.empty()) {
            errors.push_back(str_cat("rule ", id, ": empty pattern"));
            continue;
        }
        if (!is_known_validator(r.validator)) {
            errors.push_back(str_cat("rule ", id, ": unknown validator \"", r.validator, "\""));
        }
        if (r.confidence < 0 || r.confidence > 1) {
            errors.push_back(str_cat("rule ", id, ": confidence must be within 0..1"));
        }
        bool counts_ok = true;
        const std::string for_re2 = re2_compatible(r.pattern, counts_ok);
        if (!counts_ok) {
            errors.push_back(
                str_cat("rule ", id, ": a repetition minimum above 1000 is not supported"));
            continue;
        }
        c.confirm = std::make_unique<RE2>("(?:" + for_re2 + ")\\z", confirm_options());
        if (!c.confirm->ok()) {
            errors.push_back(
                str_cat("rule ", id, ": RE2 rejects the pattern: ", c.confirm->error()));
            continue;
        }
        c.groups = c.confirm->NumberOfCapturingGroups();

        hs_expr_info_t* info = nullptr;
        hs_compile_error_t* err = nullptr;
        if (hs_expression_info(r.pattern.c_str(), 0, &info, &err) != HS_SUCCESS) {
            hs_free_compile_error(err);
            err = nullptr;
            // Hyperscan cannot take it as written: scan a superset and let RE2 decide.
            c.prefilter = true;
            if (hs_expression_info(r.pattern.c_str(), HS_FLAG_PREFILTER, &info, &err) !=
                HS_SUCCESS) {
                errors.push_back(str_cat("rule ", id, ": Hyperscan rejects the pattern: ",
                                         err != nullptr ? err->message : "unknown error"));
                hs_free_compile_error(err);
                continue;
            }
        }
        const unsigned hs_max = info->max_width;
        const bool empty_ok = info->min_width == 0;
        std::free(info);
        if (empty_ok) {
            errors.push_back(str_cat("rule ", id, ": pattern matches the empty string"));
            continue;
        }
        c.width = r.max_width != 0     ? r.max_width
                  : hs_max == UINT_MAX ? unbounded_width_cap
                                       : std::size_t{hs_max};
        impl->max_width = std::max(impl->max_width, c.width);
    }
    if (!errors.empty())
        return std::unexpected(std::move(errors));

    // One block database for everything, no start-of-match (STYLE.md engine notes). A
    // pattern the compiler rejects in the combined build (e.g. "too large") is retried as
    // a prefilter; RE2 confirmation keeps the result exact.
    std::vector<unsigned> flags(rules.size()), hs_ids(rules.size());
    std::vector<const char*> exprs(rules.size());
    for (std::size_t i = 0; i < rules.size(); ++i) {
        exprs[i] = rules[i].pattern.c_str();
        hs_ids[i] = static_cast<unsigned>(i);
    }
    const bool loaded = snapshot != nullptr && load_snapshot(*snapshot, rules, *impl);
    while (!loaded) {
        for (std::size_t i = 0; i < rules.size(); ++i) {
            flags[i] = impl->compiled[i].prefilter ? HS_FLAG_PREFILTER : 0;
        }
        hs_database_t* db = nullptr;
        hs_compile_error_t* err = nullptr;
        if (hs_compile_multi(exprs.data(), flags.data(), hs_ids.data(),
                             static_cast<unsigned>(rules.size()), HS_MODE_BLOCK, nullptr, &db,
                             &err) == HS_SUCCESS) {
            impl->db.reset(db);
            break;
        }
        const int at = err->expression;
        std::string msg = err->message;
        hs_free_compile_error(err);
        if (at >= 0 && static_cast<std::size_t>(at) < rules.size() &&
            !impl->compiled[at].prefilter) {
            impl->compiled[at].prefilter = true;
            continue;
        }
        if (at >= 0 && static_cast<std::size_t>(at) < rules.size()) {
            return std::unexpected(std::vector<std::string>{
                str_cat("rule ", rules[at].id, ": Hyperscan rejects the pattern: ", msg)});
        }
        return std::unexpected(
            std::vector<std::string>{"ruleset: Hyperscan compile failed: " + msg});
    }
    // Fitting this thread's scratch now makes a database no scratch can serve fail here,
    // not at the first scan.
    impl->serial = detail::next_database_serial();
    if (!detail::thread_scratch(impl->db.get(), impl->serial)) {
        return std::unexpected(
            std::vector<std::string>{"ruleset: cannot allocate Hyperscan scratch"});
    }
    impl->rules = std::move(rules);
    impl->compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    return std::shared_ptr<const ruleset>(new ruleset(std::move(impl)));
} catch (const std::exception& e) {
    return std::unexpected(std::vector<std::string>{std::string("ruleset: ") + e.what()});
}

} // namespace sluice::detectors
