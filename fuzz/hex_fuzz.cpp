// hex decoder on arbitrary bytes: output is at most half the input, and on success
// re-encoding and decoding round-trips.
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
    if (!decode::hex(in, out))
        return 0;
    if (out.size() > in.size() / 2)
        std::abort();
    static constexpr char h[] = "0123456789abcdef";
    std::string enc;
    for (const char c : out) {
        enc += h[static_cast<unsigned char>(c) >> 4];
        enc += h[static_cast<unsigned char>(c) & 15];
    }
    std::string back;
    if (!decode::hex(enc, back) || back != out)
        std::abort();
    return 0;
}
