// Content-Encoding decoders on arbitrary bytes: the first byte picks the coding and the
// output limit; the output never exceeds the limit, whatever the stream claims.
#include "sluice/dlp/decode.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    if (in.empty())
        return 0;
    static constexpr std::string_view codings[] = {"gzip",     "deflate", "br",    "zstd",
                                                   "identity", "x-gzip",  "bogus", "GZIP"};
    const unsigned char sel = static_cast<unsigned char>(in[0]);
    const std::size_t limit = std::size_t(1) << (8 + (sel >> 3) % 12); // 256 B .. 512 KiB
    std::string out;
    const auto rc = decode::content(codings[sel & 7], in.substr(1), limit, out);
    if (out.size() > limit)
        std::abort();
    if (rc == decode::inflate_status::unknown && (sel & 7) != 6)
        std::abort();
    return 0;
}
