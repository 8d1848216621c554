// Credential brokering (issue 11; CONTRACT.md `credentials`): the agent holds a
// placeholder such as "sluice:openai", and the proxy swaps in the real secret only in a
// request of an allowed identity, to an allowed host and port, in the configured place
// (a named header, or a query parameter). A placeholder anywhere else in the request head
// (another header, the path, another query parameter) or outside its scope denies the
// request (403 `credential_scope`); placeholders in bodies and WebSocket messages are not
// looked at and so are left as they are (nothing leaks by substitution).
//
// The proxy calls apply() after DLP has passed the request (so the real secret is never
// scanned) and writes the returned values into the request it forwards; secret_masker
// then hides any reflection of an injected secret in the response.
//
// Thread safety: a credential_broker and a reflection_set are immutable after construction
// and shared by every thread of a configuration generation. A secret_masker belongs to one
// exchange. Nothing here throws except std::bad_alloc (also when Hyperscan cannot compile a
// reflection_set's literals, which fails only for lack of memory).
#pragma once

#include "sluice/detectors/literal_set.hpp"
#include "sluice/dlp/policy.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::dlp {

class reflection_set;

/// One brokered secret (config `credentials[]`, with the value already read).
struct brokered_credential {
    std::string name;
    std::string placeholder;             ///< what the agent sends; matched byte for byte
    std::string secret;                  ///< the real value; never logged or audited
    std::vector<std::string> hosts;      ///< host patterns, as host_matches()
    std::vector<std::uint16_t> ports;    ///< destination ports allowed
    std::string path_prefix;             ///< "" = any path; else the target starts with it
    std::string header_name;             ///< injected into this header (case-insensitive), or
    std::string header_value_template;   ///< ... with this value, "{secret}" replaced
    std::string query_name;              ///< injected into this query parameter (exact name)
    std::vector<std::string> identities; ///< empty = any identity
};

/// A request header as forwarded (Proxy-Authorization and hop-by-hop fields excluded).
struct broker_header {
    std::string_view name;
    std::string_view value;
};

struct broker_result {
    enum class kind {
        none,         ///< no placeholder in the head: forward as it is
        inject,       ///< forward with header_values / target replaced
        out_of_scope, ///< deny 403 credential_scope
    };
    kind outcome = kind::none;
    /// Names of the credentials injected (inject) or found out of scope (out_of_scope),
    /// each once, for the audit record.
    std::vector<std::string> credentials;
    /// inject: (index into the headers given to apply(), the value to forward instead).
    std::vector<std::pair<std::size_t, std::string>> header_values;
    /// inject: the origin-form target to forward when a query value was replaced.
    std::optional<std::string> target;
    /// inject: indices into credential_broker::credentials() of the injected secrets.
    std::vector<std::size_t> injected;
    /// inject: every form in which an injected secret went upstream (the secret, and its
    /// percent-encoded form when it went into the query), for secret_masker: an origin
    /// may echo either back.
    std::vector<std::string> reflections;
};

class credential_broker {
public:
    explicit credential_broker(std::vector<brokered_credential> credentials);

    bool empty() const noexcept { return credentials_.empty(); }
    const std::vector<brokered_credential>& credentials() const noexcept { return credentials_; }
    /// reflection_forms() of every secret: what the proxy masks in every response, so a
    /// secret an API stored and returns later is hidden too.
    const std::vector<std::string>& reflections() const noexcept { return reflections_; }
    /// reflections() compiled once, for the secret_masker of every exchange.
    const std::shared_ptr<const reflection_set>& reflection_index() const noexcept {
        return reflection_index_;
    }

    /// Looks for every placeholder in `target` (origin-form "/path?query"; percent-decoded
    /// before matching) and in the header values. A placeholder is injected when all hold:
    /// it is in the credential's header (name compared case-insensitively) or is the value
    /// of its query parameter (decoded name compared exactly); `identity` is in the
    /// credential's identities (or that list is empty); `p.credentials` is unset or names
    /// it; the normalised `host` matches one of its host patterns; `port` is one of its
    /// ports; the target starts with its path_prefix (byte for byte) and, when a prefix is set,
    /// has no dot-segment or encoded '/' or '\\' that an origin would resolve. Any
    /// other occurrence makes the whole request out_of_scope (nothing is
    /// injected). A header value is replaced by the rendered template; a query value by the
    /// secret, percent-encoded (RFC 3986 section 2.1, unreserved characters kept), other
    /// parameters byte for byte as they were. A target that is not a valid origin-form
    /// (RFC 9112 section 3.2.1) but contains a placeholder is out_of_scope.
    broker_result apply(std::string_view identity, const policy& p, std::string_view host,
                        std::uint16_t port, std::string_view target,
                        std::span<const broker_header> headers) const;

private:
    bool in_scope(const brokered_credential& c, std::string_view identity, const policy& p,
                  std::string_view host, std::uint16_t port, std::string_view target) const;

    std::vector<brokered_credential> credentials_;
    std::vector<std::string> reflections_;
    std::shared_ptr<const reflection_set> reflection_index_;
};

/// The forms in which an origin may echo a secret it was sent: as is, reversed,
/// percent-encoded (RFC 3986 section 2.1; reserved characters, and every byte), with '/' escaped as
/// in JSON, every byte as a JSON \u00XX escape (RFC 8259 section 7), as hex, and as base64 and
/// base64url (RFC 4648 sections 4 and 5) at each of the three byte alignments it can have inside a
/// longer encoded blob (only the characters that depend on the secret alone; no padding). Case is
/// left to the masker, which ignores it. Other transformations are not covered.
std::vector<std::string> reflection_forms(std::string_view secret);

/// Secrets to mask (reflection_forms() of each brokered secret), compiled into one
/// detectors::literal_set, case ignored: windows of each form at every
/// window_stride characters, and its last one. A window is secret_masker::min_prefix
/// characters (the whole form when shorter); a form written wholly as JSON \u00XX escapes
/// (or %XX) has windows and stride six (three) times as wide, so each still stands for min_prefix
/// bytes of the secret. So a piece of a form is found when it is its prefix or its end and at least
/// a window long, or anywhere and at least window + stride - 1 (15) long. Immutable after
/// construction; share it between threads.
class reflection_set {
public:
    static constexpr std::size_t window_stride = 4;
    struct window {
        std::uint32_t form, offset, width; ///< index into secrets(), and where in it
    };

    explicit reflection_set(std::vector<std::string> secrets); ///< empty strings are dropped
    ~reflection_set();
    reflection_set(const reflection_set&) = delete;
    reflection_set& operator=(const reflection_set&) = delete;

    const std::vector<std::string>& secrets() const noexcept { return secrets_; }
    const window& window_of(unsigned id) const noexcept { return windows_[id]; }
    std::size_t longest() const noexcept { return longest_; }
    std::size_t longest_window() const noexcept { return longest_window_; }
    /// The widest stride less one: a run found at all holds a window that begins at most
    /// this many bytes after the run does.
    std::size_t lead() const noexcept { return lead_; }
    /// Every run of `text` that begins before `starts_before` and follows a form far
    /// enough to hold one of its windows (extended both ways, caselessly), appended to
    /// `ranges` as [begin, end) in no particular order; the text must hold at least
    /// lead() + longest() - 1 bytes after starts_before, or end there. Uses the thread's
    /// Hyperscan scratch (detectors::literal_set).
    void occurrences(std::string_view text, std::size_t starts_before,
                     std::vector<std::pair<std::size_t, std::size_t>>& ranges) const;

private:
    std::vector<std::string> secrets_;
    std::vector<window> windows_; ///< per literal id
    std::size_t longest_ = 0;
    std::size_t longest_window_ = 0;
    std::size_t lead_ = 0;
    std::shared_ptr<const detectors::literal_set> set_; ///< null when there is no secret
};

/// Hides reflected secrets in a response: every run of the bytes that follows one of the
/// secrets, in any case, for at least one window (reflection_set: min_prefix (12) bytes,
/// the whole secret when it is shorter) becomes '*' repeated to the same length, so
/// Content-Length and chunk sizes stay right. So the whole secret is hidden, and so are
/// its pieces (reflection_set says which): a prefix cut short, the halves of one split by
/// a space, its end. Pass reflection_forms() to cover encoded, escaped and reversed echoes. Works
/// across chunk boundaries by holding back the last (longest secret - 1 + reflection_set::lead())
/// bytes until more data or the end arrives; a piece at the very end of the body is masked when
/// `last` arrives. Only raw (identity-coded) bytes are matched; the proxy asks the origin for
/// `Accept-Encoding: identity`.
///
/// Cost: one pass over the bytes for all the secrets together (one Hyperscan literal set
/// of every window of every form), whatever their number; a download through a flow with
/// brokered credentials pays it on every byte (bench/masker_bench.cpp).
class secret_masker {
public:
    /// Shortest piece of a secret that is masked on its own, in bytes.
    static constexpr std::size_t min_prefix = 12;

    /// The secrets compiled for this masker alone (copied; empty strings are ignored).
    explicit secret_masker(std::vector<std::string_view> secrets);
    /// A shared compiled set (credential_broker::reflection_index()); null = inactive.
    explicit secret_masker(std::shared_ptr<const reflection_set> set);

    bool active() const noexcept { return longest_ > 0; }
    /// Masks a whole value in place (a header field). Returns the bytes masked.
    std::size_t mask(std::string& value) const;
    /// Takes the next body bytes; returns the bytes that may be sent now (valid until the
    /// next call). `last` = the body ends here: everything held back is returned too.
    std::string_view feed(std::string_view data, bool last);
    /// Bytes replaced so far (for the audit).
    std::size_t masked() const noexcept { return masked_; }

private:
    std::shared_ptr<const reflection_set> set_;
    std::size_t longest_ = 0;

    std::string pending_; ///< original bytes not yet emitted (the held-back tail)
    std::string out_;
    std::size_t carry_ = 0; ///< bytes at the start of pending_ covered by an earlier match
    std::size_t masked_ = 0;
};

} // namespace sluice::dlp
