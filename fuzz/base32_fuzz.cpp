// base32 / base32hex decoder (decode.hpp) on arbitrary bytes: at most 5 bytes per 8
// characters, and nothing decoded means false.
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
    std::string out;
    for (const bool hexa : {false, true}) {
        const bool ok = decode::base32(in, out, hexa);
        if (out.size() > in.size() * 5 / 8 + 1 || ok != !out.empty())
            std::abort();
    }
    return 0;
}
