// The first flight of an opaque tunnel (proxy/src/client_hello.hpp): arbitrary bytes fed
// whole and cut in two at a point the input chooses must give the same state and name,
// a final state never changes again, and need_more never outlasts max_hello bytes.
#include "client_hello.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using sluice::proxy::client_hello_probe;
    if (size == 0)
        return 0;
    const std::size_t cut = data[0] % size;
    std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    client_hello_probe whole;
    const auto s = whole.feed(in);
    client_hello_probe split;
    split.feed(in.substr(0, std::min(cut, in.size())));
    const auto t = split.feed(in.substr(std::min(cut, in.size())));
    if (s != t || whole.name() != split.name())
        __builtin_trap();
    if (s != client_hello_probe::state::need_more && whole.feed("\x16\x03\x01") != s)
        __builtin_trap();
    if (s == client_hello_probe::state::need_more && in.size() > client_hello_probe::max_hello)
        __builtin_trap();
    if (s == client_hello_probe::state::named && whole.name().empty())
        __builtin_trap();
    return 0;
}
