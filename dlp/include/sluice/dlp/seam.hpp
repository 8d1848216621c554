// Seams between messages and requests (issue 21, "across messages and requests"): a secret
// whose first half ends one WebSocket message or request body and whose second half starts
// the next. Each message leaves its ends (the first and last few values it carries, field
// labels and JSON structure stripped, so `part1: X` then `part2: Y` meet as X and Y); the
// next message's ends are scanned joined with them (variant_scanner::scan_seam).
//
// Values. A JSON text (RFC 8259; by shape: it starts with '{' or '[') gives its string and
// integer values in document order (the joined view of variants.hpp). Any other text gives
// its words (split at whitespace), each with a leading label taken off (`part1:`,
// `key=`: up to 32 letters, digits, '_' or '-' and then ':' or '='; a word that is only a
// label is dropped) and quotes and brackets trimmed from both ends.
//
// Bounds. message_ends holds at most `seam_values` values at each end, each at most
// `seam_value_bytes` bytes (the first word of a first value, the last word of a last one):
// 1 KiB per message. seam_store keeps at most `seam_entries` ends (least recently kept
// evicted first), each for `seam_ttl`: at most about 24 MiB with every entry full (16 MiB
// of values, keys and bookkeeping), typically a few hundred bytes per entry.
//
// Thread safety: message_ends is a value; seam_store is safe to share between threads
// (one mutex; each call holds it for a map lookup and a copy of at most 2 KiB).
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::dlp {

inline constexpr std::size_t seam_values = 4;
inline constexpr std::size_t seam_value_bytes = 128;
inline constexpr std::size_t seam_entries = 16384;
inline constexpr std::chrono::seconds seam_ttl{60};

/// The values at the two ends of one message or request body.
struct message_ends {
    std::vector<std::string> first; ///< first values, in order (head bytes of each)
    std::vector<std::string> last;  ///< last values, in order (tail bytes of each)
    bool empty() const noexcept { return first.empty() && last.empty(); }
};

/// The ends of `text` (see the file comment). Never throws except std::bad_alloc.
message_ends ends_of(std::string_view text);

/// The last ends seen per key (identity and destination), for `seam_ttl`.
class seam_store {
public:
    using clock = std::chrono::steady_clock;

    /// The ends kept under `key` within the last `seam_ttl` before `now`; empty if none.
    message_ends recent(const std::string& key, clock::time_point now);
    /// Keeps `ends` under `key` (replacing what was there); empty ends are not kept and
    /// leave the previous ones in place.
    void keep(const std::string& key, message_ends ends, clock::time_point now);
    /// Entries held (for tests and metrics).
    std::size_t size() const;

private:
    struct entry {
        message_ends ends;
        clock::time_point at;
        std::list<std::string>::iterator order;
    };
    mutable std::mutex mu_;
    std::unordered_map<std::string, entry> map_;
    std::list<std::string> order_; ///< least recently kept first
};

} // namespace sluice::dlp
