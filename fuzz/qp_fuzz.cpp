// quoted-printable decoder on arbitrary bytes: never longer than the input; without
// '=' it is the identity.
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
    const bool changed = decode::quoted_printable(in, out);
    if (out.size() > in.size())
        std::abort();
    if (in.find('=') == std::string_view::npos && (changed || out != in))
        std::abort();
    return 0;
}
