// base64 decoder on arbitrary bytes: output is at most 3/4 of the input (rounded up),
// and decoding the standard re-encoding of the output gives the output back.
#include "sluice/dlp/decode.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::string out;
    decode::base64(in, out);
    if (out.size() > in.size() / 4 * 3 + 3)
        std::abort();
    static constexpr char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string enc;
    for (std::size_t i = 0; i < out.size(); i += 3) {
        const auto b = [&](std::size_t k) -> unsigned {
            return k < out.size() ? static_cast<unsigned char>(out[k]) : 0u;
        };
        const unsigned v = (b(i) << 16) | (b(i + 1) << 8) | b(i + 2);
        enc += a[(v >> 18) & 63];
        enc += a[(v >> 12) & 63];
        enc += i + 1 < out.size() ? a[(v >> 6) & 63] : '=';
        enc += i + 2 < out.size() ? a[v & 63] : '=';
    }
    std::string back;
    decode::base64(enc, back);
    if (back != out)
        std::abort();
    return 0;
}
