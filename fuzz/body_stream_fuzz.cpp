// dlp::body_stream on arbitrary bytes fed in arbitrary pieces, over the built-in rules:
// the first byte picks the declared coding and the window, the second the piece size.
// Checks: releasable never decreases and never passes the bytes fed; a forward verdict
// on the last piece releases the whole body; a deny carries a documented reason.
#include "shared_scanner.hpp"
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/body_stream.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

using sluice::fuzz::shared_scanner;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace sluice::dlp;
    if (size < 2)
        return 0;
    static constexpr std::string_view codings[] = {"", "gzip", "deflate", "br", "zstd", "identity"};
    static const policy pol;
    const std::string_view coding = codings[data[0] % 6];
    const std::size_t window = 64u << (data[0] / 6 % 6); // 64 B .. 2 KiB
    const std::size_t piece = 1 + data[1] % window;
    const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
    body_stream bs(pol, shared_scanner(), {}, coding, window, window / 4);
    std::uint64_t released = 0;
    for (std::size_t i = 0;; i += piece) {
        const bool last = i + piece >= body.size();
        const auto r = bs.feed(body.substr(std::min(i, body.size()), piece), last);
        if (r.releasable < released || r.releasable > std::min(body.size(), i + piece))
            std::abort();
        released = r.releasable;
        if (r.v.kind != verdict_kind::forward) {
            const auto& why = r.v.reason;
            if (why != "dlp_finding" && why != "bad_encoding" && why != "decode_budget" &&
                why != "internal")
                std::abort();
            return 0;
        }
        if (last) {
            if (released != body.size())
                std::abort();
            return 0;
        }
    }
}
