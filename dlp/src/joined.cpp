// Joined views: see joined.hpp for the model and its bounds.
#include "joined.hpp"

#include "spaces.hpp"

#include <algorithm>
#include <cstring>

namespace sluice::dlp::joined {

namespace {

using spaces::is_space;

// Counts the bytes the lines would take: the first pass, so the buffer is sized once.
class line_counter {
public:
    void put(std::string_view bytes, std::uint32_t) noexcept { size_ += bytes.size(); }
    void end() noexcept { ++size_; }
    void start_run() noexcept {}
    void drop_run() noexcept {}
    std::size_t size() const noexcept { return size_; }

private:
    std::size_t size_ = 0;
};

// Writes the lines into room sized by line_counter, with their marks when asked for.
class line_writer {
public:
    line_writer(char* at, std::size_t base, std::vector<mark>* marks) noexcept
        : begin_(at)
        , at_(at)
        , base_(base)
        , marks_(marks) {}
    [[gnu::always_inline]] void put(std::string_view bytes, std::uint32_t ordinal) {
        if (marks_)
            marks_->push_back({offset(), ordinal});
        std::memcpy(at_, bytes.data(), bytes.size());
        at_ += bytes.size();
    }
    [[gnu::always_inline]] void end() {
        if (marks_)
            marks_->push_back({offset(), no_value});
        *at_++ = '\n';
    }
    // A direct run that turns out not to cross the split is taken back.
    void start_run() noexcept {
        run_at_ = at_;
        run_marks_ = marks_ ? marks_->size() : 0;
    }
    void drop_run() {
        at_ = run_at_;
        if (marks_)
            marks_->resize(run_marks_);
    }
    std::size_t written() const noexcept { return static_cast<std::size_t>(at_ - begin_); }

private:
    std::size_t offset() const noexcept { return base_ + written(); }
    char* begin_;
    char* at_;
    std::size_t base_;
    std::vector<mark>* marks_;
    char* run_at_ = nullptr;
    std::size_t run_marks_ = 0;
};

} // namespace

namespace {

// A word that is only a field label: up to 32 letters, digits, '_' or '-', then ':' or '='
// ("part1:", "key="), as seam.hpp reads labels.
bool label_only(std::string_view w) noexcept {
    if (w.size() < 2 || w.size() > 33 || (w.back() != ':' && w.back() != '='))
        return false;
    for (const char ch : w.substr(0, w.size() - 1))
        if (!spaces::is_label_char(static_cast<unsigned char>(ch)))
            return false;
    return true;
}

} // namespace

void view::add(std::string_view raw) {
    value v;
    std::string_view s = spaces::trim(raw);
    if (!s.empty()) {
        v.any = true;
        const auto word_end = [](std::string_view t) {
            std::size_t e = 0;
            while (e < t.size() && !is_space(static_cast<unsigned char>(t[e])))
                ++e;
            return e;
        };
        std::size_t first_end = word_end(s);
        // A value that starts with a label ("part1: X", an SSE event `data: part2: Y`):
        // its first word is the word after the label, so labelled halves join as XY.
        if (first_end < s.size() && label_only(s.substr(0, first_end))) {
            s = spaces::trim(s.substr(first_end));
            first_end = word_end(s);
        }
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

// The lines of joined.hpp, written through `w` (a line_counter or a line_writer); returns
// where the window lines start, relative to the first byte written.
template <class Writer>
std::size_t view::emit(Writer& w, std::size_t split) const {
    const std::size_t n = values_.size();
    const auto ord = [](std::size_t i) { return static_cast<std::uint32_t>(i); };
    // With a split, a line is kept only when it holds values from both sides of it.
    const auto crosses = [&](std::size_t first, std::size_t last) {
        return split == 0 || (first < split && last >= split);
    };

    // Direct: consecutive values; a value that is not whole ends the run with its head and
    // starts the next with its tail.
    bool open = false;
    std::size_t run_first = 0, run_last = 0;
    const auto close = [&] {
        if (crosses(run_first, run_last))
            w.end();
        else
            w.drop_run();
        open = false;
    };
    for (std::size_t i = 0; i < n; ++i) {
        const auto& v = values_[i];
        if (!v.any)
            continue;
        if (open && !v.whole) {
            w.put(head(i), ord(i));
            run_last = i;
            close();
        }
        if (!open) {
            w.start_run();
            w.put(tail(i), ord(i));
            run_first = run_last = i;
            open = true;
        } else {
            w.put(head(i), ord(i));
            run_last = i;
        }
    }
    if (open)
        close();
    std::size_t window_at = 0;
    if constexpr (requires { w.written(); })
        window_at = w.written();

    // Windows: two or three parts, next to each other or with other values between them.
    // Each line starts with its first part, so a rule that wants a boundary before the
    // secret (AKIA...) matches, which the direct line's neighbours would prevent.
    for (std::size_t i = 0; i < n && (split == 0 || i < split); ++i) {
        if (!values_[i].any)
            continue;
        const std::size_t last =
            n <= small_view ? std::min(n - 1, i + window - 1) : std::min(n - 1, i + 2);
        for (std::size_t j = i + 1; j <= last; ++j) {
            if (!values_[j].any || !crosses(i, j))
                continue;
            w.put(tail(i), ord(i));
            w.put(head(j), ord(j));
            w.end();
        }
        for (std::size_t j = i + 1; j < last; ++j) {
            if (!values_[j].whole)
                continue;
            for (std::size_t k = j + 1; k <= last; ++k) {
                if (!values_[k].any || !crosses(i, k))
                    continue;
                w.put(tail(i), ord(i));
                w.put(head(j), ord(j));
                w.put(head(k), ord(k));
                w.end();
            }
        }
    }
    return window_at;
}

bool view::lines(std::string& out, std::vector<mark>* marks, std::size_t& window_at,
                 std::size_t split) const {
    std::size_t with_word = 0;
    for (const auto& v : values_)
        with_word += v.any ? 1 : 0;
    if (with_word < 2)
        return false;
    line_counter count;
    emit(count, split);
    const std::size_t base = out.size();
    out.resize(base + count.size());
    line_writer w(out.data() + base, base, marks);
    window_at = base + emit(w, split);
    out.resize(base + w.written());
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
