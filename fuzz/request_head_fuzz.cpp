// The request-head path: strictness checks and Beast's parse with the framing checks
// (proxy/src/request_head.hpp), on arbitrary bytes cut at the first empty line as the
// flow cuts them.
#include "request_head.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    auto end = in.find("\r\n\r\n");
    std::string_view head = end == std::string_view::npos ? in : in.substr(0, end + 4);
    boost::beast::http::request_parser<boost::beast::http::empty_body> parser;
    if (sluice::proxy::parse_request_head(head, parser)) {
        // A head that passes must be complete and carry a method and a target.
        const auto& h = parser.get();
        if (!parser.is_header_done() || h.method_string().empty() || h.target().empty())
            __builtin_trap();
    }
    return 0;
}
