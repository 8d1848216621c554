// Joined views: see joined.hpp for the model and its bounds.
#include "joined.hpp"

#include "spaces.hpp"

#include <algorithm>

namespace sluice::dlp::joined {

namespace {

using spaces::is_space;

// Appends the lines of one view; `piece(ordinal, head|tail)` gives the bytes.
class line_writer {
public:
    line_writer(std::string& out, std::vector<mark>& marks)
        : out_(out)
        , marks_(marks) {}
    void put(std::string_view bytes, std::uint32_t ordinal) {
        marks_.push_back({out_.size(), ordinal});
        out_.append(bytes);
    }
    void end() {
        marks_.push_back({out_.size(), no_value});
        out_.push_back('\n');
    }

private:
    std::string& out_;
    std::vector<mark>& marks_;
};

} // namespace

void view::add(std::string_view raw) {
    value v;
    const std::string_view s = spaces::trim(raw);
    if (!s.empty()) {
        v.any = true;
        std::size_t first_end = 0;
        while (first_end < s.size() && !is_space(static_cast<unsigned char>(s[first_end])))
            ++first_end;
        std::size_t last_begin = s.size();
        while (last_begin > 0 && !is_space(static_cast<unsigned char>(s[last_begin - 1])))
            --last_begin;
        v.whole = first_end == s.size() && s.size() <= edge;
        const std::string_view head = s.substr(0, std::min(first_end, edge));
        const std::size_t tail_len = std::min(s.size() - last_begin, edge);
        const std::string_view tail = s.substr(s.size() - tail_len);
        v.head_at = text_.size();
        v.head_len = head.size();
        text_.append(head);
        if (v.whole) {
            v.tail_at = v.head_at;
            v.tail_len = v.head_len;
        } else {
            v.tail_at = text_.size();
            v.tail_len = tail.size();
            text_.append(tail);
        }
    }
    values_.push_back(v);
}

bool view::lines(std::string& out, std::vector<mark>& marks, std::size_t& window_at) const {
    const std::size_t n = values_.size();
    std::size_t with_word = 0;
    for (const auto& v : values_)
        with_word += v.any ? 1 : 0;
    if (with_word < 2)
        return false;
    const auto head = [&](std::size_t i) { return this->head(i); };
    const auto tail = [&](std::size_t i) { return this->tail(i); };
    line_writer w(out, marks);
    const auto ord = [](std::size_t i) { return static_cast<std::uint32_t>(i); };

    // Direct: consecutive values; a value that is not whole ends the run with its head and
    // starts the next with its tail.
    bool open = false;
    for (std::size_t i = 0; i < n; ++i) {
        const auto& v = values_[i];
        if (!v.any)
            continue;
        if (open && !v.whole) {
            w.put(head(i), ord(i));
            w.end();
            open = false;
        }
        if (!open) {
            w.put(tail(i), ord(i));
            open = true;
        } else {
            w.put(head(i), ord(i));
        }
    }
    if (open)
        w.end();
    window_at = out.size();

    // Windows: two or three parts, next to each other or with other values between them.
    // Each line starts with its first part, so a rule that wants a boundary before the
    // secret (AKIA...) matches, which the direct line's neighbours would prevent.
    for (std::size_t i = 0; i < n; ++i) {
        if (!values_[i].any)
            continue;
        const std::size_t last =
            n <= small_view ? std::min(n - 1, i + window - 1) : std::min(n - 1, i + 2);
        for (std::size_t j = i + 1; j <= last; ++j) {
            if (!values_[j].any)
                continue;
            w.put(tail(i), ord(i));
            w.put(head(j), ord(j));
            w.end();
        }
        for (std::size_t j = i + 1; j < last; ++j) {
            if (!values_[j].whole)
                continue;
            for (std::size_t k = j + 1; k <= last; ++k) {
                if (!values_[k].any)
                    continue;
                w.put(tail(i), ord(i));
                w.put(head(j), ord(j));
                w.put(head(k), ord(k));
                w.end();
            }
        }
    }
    return true;
}

std::vector<std::uint32_t> span(const std::vector<mark>& marks, std::size_t off, std::size_t len) {
    auto it = std::upper_bound(marks.begin(), marks.end(), off,
                               [](std::size_t o, const mark& m) { return o < m.at; });
    if (it != marks.begin())
        --it;
    std::vector<std::uint32_t> ords;
    for (; it != marks.end() && it->at < off + len; ++it) {
        if (it->ordinal != no_value)
            ords.push_back(it->ordinal);
    }
    std::sort(ords.begin(), ords.end());
    ords.erase(std::unique(ords.begin(), ords.end()), ords.end());
    return ords;
}

std::string name_span(const std::vector<mark>& marks, std::size_t off, std::size_t len) {
    const auto ords = span(marks, off, len);
    if (ords.size() < 2)
        return {};
    std::string name;
    for (const auto o : ords) {
        if (!name.empty())
            name += '+';
        name += std::to_string(o + 1);
    }
    return name;
}

} // namespace sluice::dlp::joined
