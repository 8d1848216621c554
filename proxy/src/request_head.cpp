#include "request_head.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/string.hpp>

#include <cctype>
#include <iterator>

namespace sluice::proxy {

namespace http = boost::beast::http;

bool head_is_strict(std::string_view head) {
    constexpr std::size_t max_fields = 128;
    auto is_tchar = [](unsigned char c) {
        return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) !=
                                      std::string_view::npos;
    };
    std::size_t pos = 0;
    std::size_t fields = 0;
    bool request_line = true;
    while (pos < head.size()) {
        auto eol = head.find("\r\n", pos);
        if (eol == std::string_view::npos)
            return false;
        std::string_view line = head.substr(pos, eol - pos);
        pos = eol + 2;
        if (line.empty())
            return !request_line && pos == head.size();
        for (unsigned char c : line)
            if ((c < 0x20 && c != '\t') || c == 0x7f)
                return false; // bare CR/LF, NUL and other controls
        if (request_line) {
            if (!line.ends_with(" HTTP/1.1") && !line.ends_with(" HTTP/1.0"))
                return false;
            // method = token (RFC 9110 section 9.1, 5.6.2), then one space.
            auto sp = line.find(' ');
            if (sp == 0 || sp == std::string_view::npos)
                return false;
            for (unsigned char c : line.substr(0, sp))
                if (!is_tchar(c))
                    return false;
            request_line = false;
            continue;
        }
        if (line.front() == ' ' || line.front() == '\t')
            return false; // obs-fold
        auto colon = line.find(':');
        if (colon == 0 || colon == std::string_view::npos)
            return false;
        for (unsigned char c : line.substr(0, colon))
            if (!is_tchar(c))
                return false;
        if (++fields > max_fields)
            return false;
    }
    return false;
}

bool parse_request_head(std::string_view head, http::request_parser<http::empty_body>& parser) {
    if (head.size() > request_header_limit || !head_is_strict(head))
        return false;
    parser.header_limit(static_cast<std::uint32_t>(request_header_limit));
    parser.eager(false);
    // The body limit is the policy's (dlp.max_body, checked by the exchange), not Beast's
    // 8 MiB default, which would turn a large Content-Length into a malformed head.
    parser.body_limit(boost::none);
    boost::system::error_code ec;
    std::size_t used = parser.put(boost::asio::buffer(head.data(), head.size()), ec);
    if (ec || used != head.size() || !parser.is_header_done())
        return false;
    const auto& h = parser.get();
    // Content-Length = 1*DIGIT (RFC 9110 section 8.6): one field, digits only; a list
    // such as "5, 5" is refused rather than collapsed.
    auto cl = h.equal_range(http::field::content_length);
    if (std::distance(cl.first, cl.second) > 1)
        return false;
    if (cl.first != cl.second) {
        auto v = cl.first->value();
        if (v.empty() || v.size() > 19)
            return false;
        for (char c : v)
            if (c < '0' || c > '9')
                return false;
    }
    auto te = h.equal_range(http::field::transfer_encoding);
    auto te_count = std::distance(te.first, te.second);
    if (te_count > 1 || (te_count == 1 && (h.version() != 11 ||
                                           !boost::beast::iequals(te.first->value(), "chunked"))))
        return false;
    return true;
}

} // namespace sluice::proxy
