// bit_string (decode.hpp) on arbitrary bytes: one byte per 7 or 8 bits, so the output is
// at most an eighth of the input (plus the 7-bit groups' share), a success has 8 or more
// bytes, and a failure leaves nothing behind.
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
    const bool ok = decode::bit_string(in, out);
    if (out.size() * 7 > in.size() || (ok && out.size() < 8) || (!ok && !out.empty()))
        std::abort();
    return 0;
}
