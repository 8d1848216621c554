// uudecode (decode.hpp) on arbitrary bytes: at most 3 bytes per 4 characters plus one
// group per line, and a success decodes something; rot13 twice is the identity.
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
    const bool ok = decode::uudecode(in, out);
    if (out.size() > in.size() || ok != !out.empty())
        std::abort();
    std::string r1, r2;
    decode::rot13(in, r1);
    decode::rot13(r1, r2);
    if (r2 != in)
        std::abort();
    return 0;
}
