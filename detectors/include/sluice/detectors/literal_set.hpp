// Exact byte strings found in one pass: a Hyperscan block-mode literal database
// (hs_compile_lit_multi, Hyperscan developer reference "Literal API"), compiled once and
// shared by every thread. The dlp module uses it for operator-configured protected values
// and for the forms of brokered secrets that responses must not echo, so no module above
// this one links Hyperscan.
//
// Thread safety: a literal_set is immutable after compile; scan() may run on any number
// of threads at once. Each thread scans with its one Hyperscan scratch (thread_scratch.hpp),
// the same scratch its rules scanner uses, grown to fit every database it has met. A scan
// must not be started from inside another scan's callback on the same thread (Hyperscan
// answers HS_SCRATCH_IN_USE, and scan() returns false).
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sluice::detectors {

class literal_set {
public:
    struct options {
        bool caseless = false;   ///< ASCII letters match in either case (HS_FLAG_CASELESS)
        bool first_only = false; ///< each literal is reported once per scan (HS_FLAG_SINGLEMATCH)
    };

    /// Compiles `literals` (any bytes, NUL included); a literal's id is its index. An
    /// empty list gives a set that matches nothing. Errors: an empty literal ("literal #N
    /// is empty", 1-based), or Hyperscan failing to compile (only for lack of memory; the
    /// message never holds a literal's bytes).
    static std::expected<std::shared_ptr<const literal_set>, std::string>
    compile(const std::vector<std::string>& literals, options opts);

    ~literal_set();
    literal_set(const literal_set&) = delete;
    literal_set& operator=(const literal_set&) = delete;

    /// Called for each match with the literal's id and the offset just past its last byte
    /// in the scanned text; a match's first byte is at end - size of literal id. Overlapping
    /// matches are all reported, in order of their end. A nonzero return stops the scan.
    using match_fn = int (*)(void* ctx, unsigned id, std::size_t end);

    /// Scans text[0, text.size()) (at most 4 GiB - 1 bytes: a longer text is refused).
    /// Returns false when Hyperscan reports an error (scratch allocation, a scan started
    /// inside another on this thread) or the text is too long: callers fail closed. A scan
    /// stopped by the callback returns true.
    bool scan(std::string_view text, match_fn on_match, void* ctx) const;

    /// The same with any callable `int(unsigned id, std::size_t end)`.
    template <class F>
    bool scan(std::string_view text, F&& f) const {
        return scan(
            text,
            [](void* c, unsigned id, std::size_t end) -> int {
                return (*static_cast<std::remove_reference_t<F>*>(c))(id, end);
            },
            const_cast<void*>(static_cast<const void*>(&f)));
    }

    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }

private:
    literal_set() = default;
    void* db_ = nullptr;       ///< hs_database_t*, null when empty
    std::uint64_t serial_ = 0; ///< never reused: which databases a thread's scratch fits
    std::size_t size_ = 0;
};

} // namespace sluice::detectors
