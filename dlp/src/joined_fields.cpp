// The values joined views are made of, taken from a request's parts: path segments, query
// and form values, JSON values, SSE events. See joined.hpp.
#include "joined.hpp"

#include "sluice/dlp/decode.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <simdjson.h>

#include <cstdint>
#include <string>

namespace sluice::dlp::joined {

namespace {

constexpr std::size_t max_nesting = 64;

void walk(view& v, const simdjson::dom::element& e, std::size_t depth, std::string* strings) {
    using simdjson::dom::element_type;
    switch (e.type()) {
    case element_type::STRING: {
        std::string_view s;
        if (!e.get_string().get(s)) {
            v.add(s);
            if (strings) {
                strings->append(s);
                strings->push_back('\n');
            }
        }
        break;
    }
    case element_type::INT64:
    case element_type::UINT64:
        // Integers as written (JSON has no leading zeros or signs on positive integers):
        // a card number cut into two numbers.
        v.add(simdjson::to_string(e));
        break;
    case element_type::ARRAY: {
        simdjson::dom::array a;
        if (depth < max_nesting && !e.get_array().get(a))
            for (const simdjson::dom::element child : a)
                walk(v, child, depth + 1, strings);
        break;
    }
    case element_type::OBJECT: {
        simdjson::dom::object o;
        if (depth < max_nesting && !e.get_object().get(o))
            for (const simdjson::dom::key_value_pair kv : o) {
                if (strings) {
                    strings->append(kv.key);
                    strings->push_back('\n');
                }
                walk(v, kv.value, depth + 1, strings);
            }
        break;
    }
    default:
        break;
    }
}

// Boost.JSON SAX handler (boost/json/basic_parser.hpp): strings and integers in order.
struct sax {
    static constexpr std::size_t max_object_size = std::size_t(-1);
    static constexpr std::size_t max_array_size = std::size_t(-1);
    static constexpr std::size_t max_key_size = std::size_t(-1);
    static constexpr std::size_t max_string_size = std::size_t(-1);
    using ec_t = boost::system::error_code;
    using sv = boost::json::string_view;

    view* out = nullptr;
    std::string* strings = nullptr;
    std::string part;
    std::size_t added = 0;

    void add(sv s) {
        part.append(s.data(), s.size());
        out->add(part);
        part.clear();
        ++added;
    }
    void line(sv s) {
        part.append(s.data(), s.size());
        if (strings) {
            strings->append(part);
            strings->push_back('\n');
        }
    }
    bool on_document_begin(ec_t&) { return true; }
    bool on_document_end(ec_t&) { return true; }
    bool on_object_begin(ec_t&) { return true; }
    bool on_object_end(std::size_t, ec_t&) { return true; }
    bool on_array_begin(ec_t&) { return true; }
    bool on_array_end(std::size_t, ec_t&) { return true; }
    bool on_key_part(sv s, std::size_t, ec_t&) {
        part.append(s.data(), s.size());
        return true;
    }
    bool on_key(sv s, std::size_t, ec_t&) {
        line(s);
        part.clear();
        return true;
    }
    bool on_string_part(sv s, std::size_t, ec_t&) {
        part.append(s.data(), s.size());
        return true;
    }
    bool on_string(sv s, std::size_t, ec_t&) {
        if (strings) {
            strings->append(part).append(s.data(), s.size());
            strings->push_back('\n');
        }
        add(s);
        return true;
    }
    bool on_number_part(sv s, ec_t&) {
        part.append(s.data(), s.size());
        return true;
    }
    bool on_int64(std::int64_t, sv s, ec_t&) {
        add(s);
        return true;
    }
    bool on_uint64(std::uint64_t, sv s, ec_t&) {
        add(s);
        return true;
    }
    bool on_double(double, sv, ec_t&) {
        part.clear();
        return true;
    }
    bool on_bool(bool, ec_t&) { return true; }
    bool on_null(ec_t&) { return true; }
    bool on_comment_part(sv, ec_t&) { return true; }
    bool on_comment(sv, ec_t&) { return true; }
};

} // namespace

void add_path(view& v, std::string_view path) {
    std::string piece;
    std::size_t p = 0;
    while (p <= path.size()) {
        const std::size_t q = std::min(path.find('/', p), path.size());
        if (q > p) {
            decode::percent(path.substr(p, q - p), piece);
            v.add(piece);
        }
        p = q + 1;
    }
}

void add_form(view& v, std::string_view query) {
    std::string piece;
    std::size_t p = 0;
    while (p <= query.size()) {
        const std::size_t q = std::min(query.find('&', p), query.size());
        const std::string_view pair = query.substr(p, q - p);
        const std::size_t eq = pair.find('=');
        if (eq != std::string_view::npos) {
            decode::percent(pair.substr(eq + 1), piece, true);
            v.add(piece);
        } else if (!pair.empty()) {
            // A bare word ("?AKIA...&...") is a value too.
            decode::percent(pair, piece, true);
            v.add(piece);
        }
        p = q + 1;
    }
}

bool add_json(view& v, std::string_view text, std::string* strings) {
    const std::size_t before = v.size();
    {
        simdjson::dom::parser parser;
        simdjson::dom::element doc;
        if (!parser.parse(text.data(), text.size(), true).get(doc)) {
            walk(v, doc, 0, strings);
            return v.size() > before;
        }
    }
    boost::json::parse_options opts;
    opts.max_depth = max_nesting;
    boost::json::basic_parser<sax> p(opts);
    p.handler().out = &v;
    p.handler().strings = strings;
    boost::system::error_code ec;
    p.write_some(false, text.data(), text.size(), ec);
    return p.handler().added > 0;
}

std::vector<std::string> sse_events(std::string_view data) {
    std::vector<std::string> events;
    std::string event;
    bool any = false;
    std::size_t p = 0;
    while (p <= data.size()) {
        std::size_t q = data.find('\n', p);
        if (q == std::string_view::npos)
            q = data.size();
        std::string_view line = data.substr(p, q - p);
        if (!line.empty() && line.back() == '\r')
            line.remove_suffix(1);
        if (line.empty()) {
            if (any)
                events.push_back(std::move(event));
            event.clear();
            any = false;
        } else if (line.starts_with("data:")) {
            line.remove_prefix(5);
            if (!line.empty() && line.front() == ' ')
                line.remove_prefix(1);
            event += line;
            any = true;
        }
        p = q + 1;
    }
    if (any)
        events.push_back(std::move(event));
    return events;
}

void add_sse(view& v, std::string_view data) {
    for (const auto& e : sse_events(data))
        v.add(e);
}

} // namespace sluice::dlp::joined
