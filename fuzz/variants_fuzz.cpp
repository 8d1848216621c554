// The whole variant pipeline on arbitrary bytes, over the built-in rules: the first byte
// picks the entry point (text, URL, body with a Content-Type and Content-Encoding) and a
// small budget, so budget exhaustion paths run too. Checks that every finding names a
// chain without input bytes, that offsets lie inside the outermost buffer for text and
// URL scans, and that the scanner never reports an internal error.
#include "shared_scanner.hpp"
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/dlp/variants.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace {

using sluice::fuzz::shared_scanner;

bool chain_ok(std::string_view v) {
    for (const char c : v) {
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '>'))
            return false;
    }
    return !v.empty();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace sluice::dlp;
    if (size < 1)
        return 0;
    const unsigned sel = data[0];
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    variant_options o;
    if (sel & 0x80) {
        o.budget.max_decoded_bytes = 4096;
        o.budget.max_candidates = 16;
        o.budget.decoded_floor = 1024;
        o.budget.decoded_ratio = 2;
    }
    variant_scanner vs(shared_scanner(), o);
    std::vector<variant_finding> out;
    variant_status st = variant_status::ok;
    static constexpr std::string_view types[] = {
        "application/json", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b",
        "text/event-stream", "text/plain"};
    static constexpr std::string_view codings[] = {"",     "gzip",     "deflate",  "br",
                                                   "zstd", "gzip, br", "identity", "x-unknown"};
    switch (sel % 4) {
    case 0:
        st = vs.scan(in, "body", out);
        break;
    case 1: {
        const std::size_t cut = in.find('\n');
        st = vs.scan_url(in.substr(0, cut),
                         cut == std::string_view::npos ? std::string_view{} : in.substr(cut + 1),
                         out);
        break;
    }
    default:
        st = vs.scan_body(in, types[(sel >> 2) % 5], codings[(sel >> 4) & 7], out);
        break;
    }
    if (st == variant_status::scanner_error)
        std::abort();
    for (const auto& f : out) {
        if (f.variant != "raw" && !chain_ok(f.variant))
            std::abort();
        if (f.f.fingerprint.size() != 23 || f.f.begin > f.f.end)
            std::abort();
        if (sel % 4 == 0 && (f.offset > in.size() || f.length > in.size() - f.offset))
            std::abort();
    }
    return 0;
}
