// byte-list decoder (decode.hpp) on arbitrary bytes: one byte per value, every value
// takes at least one character, and a success has 8 or more.
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
    const bool ok = decode::byte_list(in, out);
    if (out.size() > in.size() || (ok && out.size() < 8) || (!ok && !out.empty()))
        std::abort();
    return 0;
}
