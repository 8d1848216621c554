// Compressed bodies recognised without a Content-Encoding (decode.hpp sniffed: gzip, zlib,
// zstd, bzip2 by magic, raw DEFLATE by trial on binary-looking bytes) on arbitrary bytes:
// output stays under the limit, an unknown body yields nothing, and leftovers are copies of
// input bytes (never longer than the input).
#include "sluice/dlp/decode.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    constexpr std::size_t limit = 1 << 20;
    std::string out;
    std::string_view name;
    decode::leftovers left;
    const auto rc = decode::sniffed(in, limit, out, name, &left);
    if (out.size() > limit)
        std::abort();
    if (rc == decode::inflate_status::unknown && !out.empty())
        std::abort();
    for (const auto& l : left)
        if (l.size() > size)
            std::abort();
    return 0;
}
