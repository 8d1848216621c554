#include "cli_table.hpp"

#include "sluice/detectors/text.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <iostream>
#include <sys/ioctl.h>
#include <unistd.h>

namespace sluice::cli {

namespace json = boost::json;

std::string printable(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (unsigned char c : s) {
        if (c < 0x20 || c == 0x7f) {
            out += "\\x";
            text::append_hex(out, std::string_view(reinterpret_cast<const char*>(&c), 1));
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

std::size_t display_width(std::string_view s) {
    std::size_t n = 0;
    for (unsigned char c : s)
        n += (c & 0xC0) != 0x80; // count UTF-8 code points, not bytes
    return n;
}

std::string cut(const std::string& s, std::size_t width) {
    if (display_width(s) <= width)
        return s;
    if (width == 0)
        return {};
    std::string out;
    std::size_t n = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if ((c & 0xC0) != 0x80 && ++n > width - 1)
            break;
        out += s[i];
    }
    return out + "\u2026";
}

std::optional<std::size_t> terminal_width() {
    if (!::isatty(STDOUT_FILENO))
        return std::nullopt;
    struct winsize ws {};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

void table::add(std::vector<std::string> row, std::vector<std::string> row_notes) {
    for (auto& cell : row)
        cell = printable(cell);
    for (auto& n : row_notes)
        n = printable(n);
    rows.push_back(std::move(row));
    notes.push_back(std::move(row_notes));
}

void table::print(std::ostream& os) const {
    std::vector<std::size_t> w(header.size());
    for (std::size_t c = 0; c < header.size(); ++c) {
        w[c] = display_width(header[c]);
        for (const auto& r : rows)
            w[c] = std::max(w[c], display_width(r[c]));
    }
    auto term = terminal_width();
    if (term) {
        std::size_t total = 0;
        for (auto x : w)
            total += x + 2;
        if (total > *term) {
            std::size_t excess = total - *term;
            std::size_t min_flex = std::max<std::size_t>(display_width(header[flex]), 12);
            w[flex] = w[flex] > min_flex + excess ? w[flex] - excess : std::min(w[flex], min_flex);
        }
    }
    auto line = [&](const std::vector<std::string>& cells) {
        std::string out;
        for (std::size_t c = 0; c < cells.size(); ++c) {
            std::string cell = cut(cells[c], w[c]);
            std::string pad(w[c] - display_width(cell), ' ');
            bool last = c + 1 == cells.size();
            bool r = c < right.size() && right[c];
            out += r ? pad + cell : (last ? cell : cell + pad);
            if (!last)
                out += "  ";
        }
        os << out << "\n";
    };
    line(header);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        line(rows[i]);
        for (const auto& n : notes[i])
            os << "    " << (term ? cut(n, *term > 4 ? *term - 4 : 0) : n) << "\n";
    }
}

std::string str(const json::object& o, std::string_view key) {
    if (const auto* v = o.if_contains(key)) {
        if (v->is_string())
            return std::string(v->as_string());
        if (v->is_int64())
            return std::to_string(v->as_int64());
        if (v->is_uint64())
            return std::to_string(v->as_uint64());
        if (v->is_bool())
            return v->as_bool() ? "true" : "false";
    }
    return {};
}

std::int64_t num(const json::object& o, std::string_view key) {
    if (const auto* v = o.if_contains(key)) {
        if (v->is_int64())
            return v->as_int64();
        if (v->is_uint64())
            return static_cast<std::int64_t>(std::min<std::uint64_t>(v->as_uint64(), INT64_MAX));
        if (v->is_double())
            return static_cast<std::int64_t>(v->as_double());
    }
    return -1;
}

std::string human_ms(std::int64_t ms) {
    if (ms < 0)
        return "-";
    if (ms < 1000)
        return std::to_string(ms) + "ms";
    std::int64_t s = ms / 1000;
    char buf[32];
    if (s < 60)
        std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
    else if (s < 3600)
        std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                      static_cast<long long>(s % 60));
    else if (s < 86400)
        std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                      static_cast<long long>(s / 60 % 60));
    else
        std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(s / 86400),
                      static_cast<long long>(s / 3600 % 24));
    return buf;
}

std::string human_bytes(std::int64_t b) {
    if (b < 0)
        return "-";
    if (b < 1024)
        return std::to_string(b) + " B";
    static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(b);
    int u = -1;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

void print_json(const json::value& v) {
    std::cout << json::serialize(v) << "\n";
}

} // namespace sluice::cli
