// The joined-view extractor (dlp/src/joined.hpp) on arbitrary bytes: the first byte picks
// the extraction (JSON, form/query, path, SSE), the rest is the text. The lines stay within
// the documented bound, marks are in order and inside the lines, and every span name is
// empty or lists at least two ordinals of values that exist. The fast path (no marks)
// writes the same bytes, and with a split every line holds values from both sides.
#include "joined.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

using namespace sluice::dlp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0)
        return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    joined::view v("fuzz");
    switch (data[0] % 4) {
    case 0:
        joined::add_json(v, text);
        break;
    case 1:
        joined::add_form(v, text);
        break;
    case 2:
        joined::add_path(v, text);
        break;
    default:
        joined::add_sse(v, text);
        break;
    }
    std::string out;
    std::vector<joined::mark> marks;
    std::size_t window_at = 0;
    if (!v.lines(out, marks, window_at)) {
        if (!out.empty() || !marks.empty())
            std::abort();
        return 0;
    }
    const std::size_t n = v.size();
    const std::size_t w = joined::window;
    const std::size_t bound =
        n * (2 * joined::edge + 1) + n * ((w - 1) * (w - 2) / 2 + w) * (3 * joined::edge + 1);
    if (out.size() > bound || window_at > out.size())
        std::abort();
    for (std::size_t i = 0; i < marks.size(); ++i) {
        if (marks[i].at > out.size() || (i > 0 && marks[i].at < marks[i - 1].at))
            std::abort();
        if (marks[i].ordinal != joined::no_value && marks[i].ordinal >= n)
            std::abort();
    }
    for (std::size_t off = 0; off < out.size(); off += 7) {
        const std::string name = joined::name_span(marks, off, 9);
        if (!name.empty() && name.find('+') == std::string::npos)
            std::abort();
    }
    std::string fast;
    std::size_t fast_at = 0;
    if (!v.lines(fast, nullptr, fast_at) || fast != out || fast_at != window_at)
        std::abort();
    // A split after the first byte's worth of values: each line written crosses it.
    const std::size_t split = 1 + data[0] / 4 % n;
    std::string cut;
    std::vector<joined::mark> cut_marks;
    std::size_t cut_at = 0;
    if (!v.lines(cut, &cut_marks, cut_at, split) || cut.size() > out.size())
        std::abort();
    for (std::size_t begin = 0; begin < cut.size();) {
        const std::size_t end = cut.find('\n', begin);
        if (end == std::string::npos)
            std::abort(); // every line ends with '\n'
        const auto ords = joined::span(cut_marks, begin, end - begin);
        if (end > begin && (ords.empty() || ords.front() >= split || ords.back() < split))
            std::abort();
        begin = end + 1;
    }
    return 0;
}
