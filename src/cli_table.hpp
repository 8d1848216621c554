// Text output of the admin commands: aligned tables cut to the terminal's width (full
// width when stdout is not a terminal), control bytes shown as \xNN (the data comes partly
// from agents), and human units. Internal to the sluice executable.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

/// `s` with control bytes (< 0x20, 0x7f) as \xNN.
std::string printable(std::string_view s);
/// UTF-8 code points in `s` (what a terminal shows for text without wide characters).
std::size_t display_width(std::string_view s);
/// `s` cut to `width` code points, the last one an ellipsis when cut.
std::string cut(const std::string& s, std::size_t width);
/// The terminal's width in columns when stdout is a terminal (80 when unknown).
std::optional<std::size_t> terminal_width();

/// An aligned table; `flex` is the column cut first when a terminal is too narrow.
struct table {
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    std::vector<std::vector<std::string>> notes; ///< per row: indented lines printed under it
    std::size_t flex = 0;
    std::vector<bool> right; ///< right-aligned columns

    /// Adds a row (cells made printable); `row` has one cell per header column.
    void add(std::vector<std::string> row, std::vector<std::string> row_notes = {});
    void print(std::ostream& os) const;
};

/// A JSON field as text (strings, integers, booleans), or "" when absent or another type.
std::string str(const boost::json::object& o, std::string_view key);
/// A JSON number field as an integer, or -1 when absent or not a number.
std::int64_t num(const boost::json::object& o, std::string_view key);
/// "850ms", "42s", "3m07s", "2h05m", "1d03h"; "-" for a negative value.
std::string human_ms(std::int64_t ms);
/// "512 B", "1.5 KiB", ...; "-" for a negative value.
std::string human_bytes(std::int64_t b);
/// One line of JSON on stdout.
void print_json(const boost::json::value& v);

} // namespace sluice::cli
