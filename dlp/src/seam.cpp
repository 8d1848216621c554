// Ends of messages and the store that keeps them: see sluice/dlp/seam.hpp.
#include "sluice/dlp/seam.hpp"

#include "joined.hpp"
#include "spaces.hpp"

#include <algorithm>

namespace sluice::dlp {

namespace {

static_assert(seam_value_bytes == joined::edge, "an end value is one joined-view word");

using spaces::is_label_char;
using spaces::is_space;

// A word without its label (`part1:X` -> X) and the quotes and brackets around it.
std::string_view bare(std::string_view w) noexcept {
    constexpr std::string_view wrap = "\"'`,;()[]{}<>";
    while (!w.empty() && wrap.find(w.front()) != std::string_view::npos)
        w.remove_prefix(1);
    std::size_t i = 0;
    while (i < w.size() && i <= 32 && is_label_char(static_cast<unsigned char>(w[i])))
        ++i;
    if (i > 0 && i <= 32 && i < w.size() && (w[i] == ':' || w[i] == '=')) {
        w.remove_prefix(i + 1);
        while (!w.empty() && wrap.find(w.front()) != std::string_view::npos)
            w.remove_prefix(1);
    }
    while (!w.empty() && wrap.find(w.back()) != std::string_view::npos)
        w.remove_suffix(1);
    return w;
}

// Up to `seam_values` bare words from the front (forward) or the back of `text`.
std::vector<std::string> words(std::string_view text, bool forward) {
    std::vector<std::string> out;
    std::size_t p = forward ? 0 : text.size();
    while (out.size() < seam_values) {
        std::string_view w;
        if (forward) {
            while (p < text.size() && is_space(static_cast<unsigned char>(text[p])))
                ++p;
            if (p == text.size())
                break;
            std::size_t q = p;
            while (q < text.size() && !is_space(static_cast<unsigned char>(text[q])))
                ++q;
            w = text.substr(p, q - p);
            p = q;
        } else {
            while (p > 0 && is_space(static_cast<unsigned char>(text[p - 1])))
                --p;
            if (p == 0)
                break;
            std::size_t q = p;
            while (q > 0 && !is_space(static_cast<unsigned char>(text[q - 1])))
                --q;
            w = text.substr(q, p - q);
            p = q;
        }
        w = bare(w);
        if (w.empty())
            continue;
        out.emplace_back(forward ? w.substr(0, seam_value_bytes)
                                 : w.substr(w.size() - std::min(w.size(), seam_value_bytes)));
    }
    if (!forward)
        std::reverse(out.begin(), out.end());
    return out;
}

} // namespace

message_ends joined::ends_from(const view& v) {
    message_ends e;
    std::vector<std::size_t> with_word;
    for (std::size_t i = 0; i < v.size(); ++i)
        if (!v.head(i).empty())
            with_word.push_back(i);
    const std::size_t k = std::min(seam_values, with_word.size());
    for (std::size_t i = 0; i < k; ++i)
        e.first.emplace_back(v.head(with_word[i]));
    for (std::size_t i = with_word.size() - k; i < with_word.size(); ++i)
        e.last.emplace_back(v.tail(with_word[i]));
    return e;
}

message_ends joined::ends_of_words(std::string_view text) {
    message_ends e;
    e.first = words(text, true);
    e.last = words(text, false);
    return e;
}

message_ends ends_of(std::string_view text) {
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && (text[first] == '{' || text[first] == '[')) {
        joined::view v("ends");
        if (joined::add_json(v, text))
            return joined::ends_from(v);
    }
    return joined::ends_of_words(text);
}

message_ends seam_store::recent(const std::string& key, clock::time_point now) {
    std::lock_guard lock(mu_);
    const auto it = map_.find(key);
    if (it == map_.end())
        return {};
    if (now - it->second.at > seam_ttl) {
        order_.erase(it->second.order);
        map_.erase(it);
        return {};
    }
    return it->second.ends;
}

void seam_store::keep(const std::string& key, message_ends ends, clock::time_point now) {
    if (ends.empty())
        return;
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
        order_.erase(it->second.order);
        it->second.ends = std::move(ends);
        it->second.at = now;
        it->second.order = order_.insert(order_.end(), key);
        return;
    }
    while (map_.size() >= seam_entries && !order_.empty()) {
        map_.erase(order_.front());
        order_.pop_front();
    }
    const auto pos = order_.insert(order_.end(), key);
    map_.emplace(key, entry{std::move(ends), now, pos});
}

std::size_t seam_store::size() const {
    std::lock_guard lock(mu_);
    return map_.size();
}

} // namespace sluice::dlp
