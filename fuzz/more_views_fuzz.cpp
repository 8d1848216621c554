// the whole-buffer finder of the variant pipeline (decode.hpp more_views) on arbitrary
// bytes: views lie inside the input, hold bytes, and stay under the limit and the count.
#include "sluice/dlp/decode.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<decode::text_view> views;
    const std::size_t limit = size * 2 + 64;
    decode::more_views(in, limit, views);
    std::size_t total = 0;
    for (const auto& v : views) {
        if (v.begin > v.end || v.end > size || v.bytes.empty())
            std::abort();
        total += v.bytes.size();
    }
    if (views.size() > 64 || total > limit)
        std::abort();
    return 0;
}
