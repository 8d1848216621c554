// Text decoders. They are deliberately lenient (skip what they do not understand rather
// than fail) because the input is whatever an agent sent: a strict decoder would let a
// single stray byte hide the rest of a wrapped secret.
#include "sluice/dlp/decode.hpp"

#include <array>
#include <cstdint>

namespace sluice::dlp::decode {

namespace {

constexpr std::array<std::int8_t, 256> make_b64() {
    std::array<std::int8_t, 256> t{};
    for (auto& v : t)
        v = -1;
    for (int i = 0; i < 26; ++i) {
        t['A' + i] = static_cast<std::int8_t>(i);
        t['a' + i] = static_cast<std::int8_t>(26 + i);
    }
    for (int i = 0; i < 10; ++i)
        t['0' + i] = static_cast<std::int8_t>(52 + i);
    t['+'] = t['-'] = 62;
    t['/'] = t['_'] = 63;
    return t;
}
constexpr auto b64_table = make_b64();

constexpr std::array<std::int8_t, 256> make_hex() {
    std::array<std::int8_t, 256> t{};
    for (auto& v : t)
        v = -1;
    for (int i = 0; i < 10; ++i)
        t['0' + i] = static_cast<std::int8_t>(i);
    for (int i = 0; i < 6; ++i) {
        t['a' + i] = static_cast<std::int8_t>(10 + i);
        t['A' + i] = static_cast<std::int8_t>(10 + i);
    }
    return t;
}
constexpr auto hex_table = make_hex();

int hexv(char c) noexcept {
    return hex_table[static_cast<unsigned char>(c)];
}

void put_utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp <= 0x10FFFF) {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Reads exactly `n` hex digits at in[i..]; -1 if any is not hex.
long hex_n(std::string_view in, std::size_t i, std::size_t n) noexcept {
    if (i + n > in.size())
        return -1;
    long v = 0;
    for (std::size_t k = 0; k < n; ++k) {
        const int d = hexv(in[i + k]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

// "{X...}" at in[open] (\u{...}, \x{...}): 1 to 6 hex digits, then '}' at `close`. The
// value, or -1 when the form does not hold.
long braced_hex(std::string_view in, std::size_t open, std::size_t& close) noexcept {
    close = in.find('}', open + 1);
    if (close == std::string_view::npos || close == open + 1 || close - (open + 1) > 6)
        return -1;
    return hex_n(in, open + 1, close - (open + 1));
}

} // namespace

bool base64(std::string_view in, std::string& out) {
    out.clear();
    out.reserve(in.size() / 4 * 3 + 3);
    std::uint32_t acc = 0;
    int bits = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(in[i]);
        const int v = b64_table[c];
        if (v < 0) {
            if (c == '\r' || c == '\n')
                continue;
            // A line break written as a string escape ("\r\n" in JSON or JavaScript).
            if (c == '\\' && i + 1 < in.size() && (in[i + 1] == 'r' || in[i + 1] == 'n')) {
                ++i;
                continue;
            }
            break; // '=' padding or the end of the run
        }
        acc = (acc << 6) | static_cast<std::uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xFF);
        }
    }
    return !out.empty();
}

bool hex(std::string_view in, std::string& out) {
    out.clear();
    out.reserve(in.size() / 2);
    std::size_t i = 0;
    const std::size_t n = in.size();
    while (i < n) {
        const char c = in[i];
        if (c == ':' || c == '-' || c == ' ') {
            ++i;
            continue;
        }
        if ((c == '\\' || c == '0') && i + 1 < n && (in[i + 1] == 'x' || in[i + 1] == 'X')) {
            // "\x67" or "0x67"; a bare "0x" inside plain hex cannot occur ('x' is not hex).
            i += 2;
            continue;
        }
        const int hi = hexv(c);
        if (hi < 0 || i + 1 >= n)
            return false;
        const int lo = hexv(in[i + 1]);
        if (lo < 0)
            return false;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
    }
    return !out.empty();
}

bool percent(std::string_view in, std::string& out, bool plus_is_space) {
    out.clear();
    out.reserve(in.size());
    bool changed = false;
    for (std::size_t i = 0; i < in.size(); ++i) {
        const char c = in[i];
        if (c == '%') {
            // %uXXXX (the non-standard form of JavaScript's escape() and IIS): a code point.
            const long u = i + 1 < in.size() && (in[i + 1] == 'u' || in[i + 1] == 'U')
                               ? hex_n(in, i + 2, 4)
                               : -1;
            if (u >= 0) {
                put_utf8(static_cast<std::uint32_t>(u), out);
                i += 5;
                changed = true;
                continue;
            }
            const long v = hex_n(in, i + 1, 2);
            if (v >= 0) {
                out += static_cast<char>(v);
                i += 2;
                changed = true;
                continue;
            }
        }
        if (c == '+' && plus_is_space) {
            out += ' ';
            changed = true;
            continue;
        }
        out += c;
    }
    return changed;
}

bool js_escape(std::string_view in, std::string& out) {
    out.clear();
    out.reserve(in.size());
    bool changed = false;
    std::uint32_t pending_high = 0; // a high surrogate waiting for its low half
    const std::size_t n = in.size();
    for (std::size_t i = 0; i < n; ++i) {
        if (in[i] != '\\' || i + 1 >= n) {
            pending_high = 0;
            out += in[i];
            continue;
        }
        const char e = in[i + 1];
        changed = true;
        if (e == 'u') {
            long v = -1;
            std::size_t len = 0;
            if (i + 2 < n && in[i + 2] == '{') {
                std::size_t close = 0;
                v = braced_hex(in, i + 2, close);
                len = close - i + 1;
            } else {
                v = hex_n(in, i + 2, 4);
                len = 6;
            }
            if (v < 0) {
                out += 'u';
                ++i;
                pending_high = 0;
                continue;
            }
            const auto cp = static_cast<std::uint32_t>(v);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                pending_high = cp;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                if (pending_high != 0) {
                    put_utf8(0x10000 + ((pending_high - 0xD800) << 10) + (cp - 0xDC00), out);
                }
                pending_high = 0;
            } else {
                put_utf8(cp, out);
                pending_high = 0;
            }
            i += len - 1;
            continue;
        }
        pending_high = 0;
        if (e == 'U') { // \UXXXXXXXX (C, Python): eight hex digits, a code point
            const long v = hex_n(in, i + 2, 8);
            if (v >= 0 && v <= 0x10FFFF) {
                put_utf8(static_cast<std::uint32_t>(v), out);
                i += 9;
            } else {
                out += 'U';
                ++i;
            }
            continue;
        }
        if (e == 'x' && i + 2 < n && in[i + 2] == '{') { // \x{XX} (Perl, PCRE): a code point
            std::size_t close = 0;
            const long v = braced_hex(in, i + 2, close);
            if (v >= 0 && v <= 0x10FFFF) {
                put_utf8(static_cast<std::uint32_t>(v), out);
                i = close;
            } else {
                out += 'x';
                ++i;
            }
            continue;
        }
        if (e == 'x') {
            const long v = hex_n(in, i + 2, 2);
            if (v >= 0) {
                out += static_cast<char>(v);
                i += 3;
            } else {
                out += 'x';
                ++i;
            }
            continue;
        }
        if (e >= '0' && e <= '7') {
            int v = 0;
            std::size_t k = i + 1;
            while (k < n && k < i + 4 && in[k] >= '0' && in[k] <= '7' &&
                   v * 8 + (in[k] - '0') < 256)
                v = v * 8 + (in[k++] - '0');
            out += static_cast<char>(v);
            i = k - 1;
            continue;
        }
        switch (e) {
        case 'n':
            out += '\n';
            break;
        case 'r':
            out += '\r';
            break;
        case 't':
            out += '\t';
            break;
        case 'b':
            out += '\b';
            break;
        case 'f':
            out += '\f';
            break;
        case 'v':
            out += '\v';
            break;
        default:
            out += e;
            break; // \" \' \\ \/ and unknown escapes
        }
        ++i;
    }
    return changed;
}

bool html_entities(std::string_view in, std::string& out) {
    struct named {
        std::string_view name;
        char value;
    };
    static constexpr named names[] = {
        {"amp", '&'},    {"lt", '<'},     {"gt", '>'},     {"quot", '"'},   {"apos", '\''},
        {"nbsp", ' '},   {"colon", ':'},  {"sol", '/'},    {"equals", '='}, {"plus", '+'},
        {"percnt", '%'}, {"lowbar", '_'}, {"hyphen", '-'}, {"period", '.'}, {"num", '#'},
        {"bsol", '\\'},  {"commat", '@'}, {"dollar", '$'}, {"excl", '!'},   {"quest", '?'},
    };
    out.clear();
    out.reserve(in.size());
    bool changed = false;
    const std::size_t n = in.size();
    for (std::size_t i = 0; i < n; ++i) {
        if (in[i] != '&') {
            out += in[i];
            continue;
        }
        const std::size_t semi = in.find(';', i + 1);
        if (semi == std::string_view::npos || semi - i > 12) {
            out += '&';
            continue;
        }
        const std::string_view body = in.substr(i + 1, semi - i - 1);
        bool done = false;
        if (body.size() >= 2 && body[0] == '#') {
            long v = -1;
            if (body[1] == 'x' || body[1] == 'X') {
                if (body.size() > 2 && body.size() <= 8)
                    v = hex_n(body, 2, body.size() - 2);
            } else if (body.size() <= 8) {
                v = 0;
                for (std::size_t k = 1; k < body.size(); ++k) {
                    if (body[k] < '0' || body[k] > '9') {
                        v = -1;
                        break;
                    }
                    v = v * 10 + (body[k] - '0');
                }
            }
            if (v >= 0 && v <= 0x10FFFF) {
                put_utf8(static_cast<std::uint32_t>(v), out);
                done = true;
            }
        } else {
            for (const auto& e : names) {
                if (e.name == body) {
                    out += e.value;
                    done = true;
                    break;
                }
            }
        }
        if (done) {
            changed = true;
            i = semi;
        } else {
            out += '&';
        }
    }
    return changed;
}

bool quoted_printable(std::string_view in, std::string& out) {
    out.clear();
    out.reserve(in.size());
    bool changed = false;
    const std::size_t n = in.size();
    for (std::size_t i = 0; i < n; ++i) {
        if (in[i] != '=') {
            out += in[i];
            continue;
        }
        if (i + 1 < n && in[i + 1] == '\n') {
            ++i;
            changed = true;
            continue;
        }
        if (i + 2 < n && in[i + 1] == '\r' && in[i + 2] == '\n') {
            i += 2;
            changed = true;
            continue;
        }
        const long v = hex_n(in, i + 1, 2);
        if (v >= 0) {
            out += static_cast<char>(v);
            i += 2;
            changed = true;
        } else {
            out += '=';
        }
    }
    return changed;
}

} // namespace sluice::dlp::decode
