// Scanner on arbitrary bytes: one block scan, then the same bytes fed to a stream scanner
// in pieces whose sizes come from the input's first bytes. Checks that every finding lies
// inside the data and that the scanner never fails on well-formed calls.
#include "shared_scanner.hpp"
#include "sluice/config/rules_loader.hpp"
#include "sluice/detectors/ruleset.hpp"
#include "sluice/detectors/scanner.hpp"
#include "sluice/detectors/stream_scanner.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace {

using sluice::fuzz::shared_scanner;

void check(const std::vector<sluice::detectors::finding>& fs, std::size_t size) {
    for (const auto& f : fs) {
        if (f.begin >= f.end || f.end > size || f.fingerprint.size() != 23)
            std::abort();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1)
        return 0;
    // Byte 0: number of split points (0..7); the next bytes give each piece's length.
    const std::size_t splits = data[0] % 8;
    if (size < 1 + splits)
        return 0;
    const std::uint8_t* lens = data + 1;
    const std::string_view text(reinterpret_cast<const char*>(data + 1 + splits),
                                size - 1 - splits);

    auto& s = shared_scanner();
    std::vector<sluice::detectors::finding> block;
    if (!s.scan(text, block))
        std::abort();
    check(block, text.size());

    sluice::detectors::stream_scanner stream(s);
    std::vector<sluice::detectors::finding> streamed;
    std::size_t at = 0;
    for (std::size_t i = 0; i < splits && at < text.size(); ++i) {
        const std::size_t n = std::min<std::size_t>(lens[i], text.size() - at);
        if (!stream.feed(text.substr(at, n), streamed))
            std::abort();
        at += n;
    }
    if (!stream.feed(text.substr(at), streamed))
        std::abort();
    if (!stream.finish(streamed))
        std::abort();
    check(streamed, text.size());
    if (stream.offset() != text.size())
        std::abort();
    return 0;
}
