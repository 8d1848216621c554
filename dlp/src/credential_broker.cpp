#include "sluice/dlp/credential_broker.hpp"

#include "sluice/detectors/text.hpp"

#include <boost/url/encode.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>
#include <boost/url/url.hpp>

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <new>
#include <unordered_set>

namespace sluice::dlp {

namespace {

using text::iequals;

std::string render(std::string_view tmpl, std::string_view secret) {
    constexpr std::string_view mark = "{secret}";
    std::string out;
    out.reserve(tmpl.size() + secret.size());
    std::size_t at = 0;
    for (;;) {
        auto hit = tmpl.find(mark, at);
        if (hit == std::string_view::npos) {
            out.append(tmpl.substr(at));
            return out;
        }
        out.append(tmpl.substr(at, hit - at));
        out.append(secret);
        at = hit + mark.size();
    }
}

void note(std::vector<std::string>& names, const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
    }
}

// A path a prefix check can trust: no dot-segment and no encoded '/' or '\\' after
// percent-decoding (RFC 3986 section 5.2.4: "/v1/../admin" is "/admin" to the origin).
bool plain_path(std::string_view target) {
    auto parsed = boost::urls::parse_origin_form(target);
    if (!parsed) {
        return false;
    }
    for (auto seg : parsed->encoded_segments()) {
        std::string d = seg.decode();
        if (d == "." || d == ".." || d.find('/') != std::string::npos ||
            d.find('\\') != std::string::npos) {
            return false;
        }
    }
    return true;
}

} // namespace

std::vector<std::string> reflection_forms(std::string_view secret) {
    std::vector<std::string> forms;
    auto add = [&](std::string f) {
        if (!f.empty() && std::find(forms.begin(), forms.end(), f) == forms.end()) {
            forms.push_back(std::move(f));
        }
    };
    // Case is not kept apart: the masker matches caselessly (reflection_set), so one
    // spelling of each percent or hex form stands for every other.
    add(std::string(secret));
    add(boost::urls::encode(secret, boost::urls::unreserved_chars));
    std::string json; // JSON may escape '/' as "\/" (RFC 8259 section 7)
    for (char c : secret) {
        if (c == '/') {
            json += '\\';
        }
        json += c;
    }
    add(json);
    // Every byte escaped, as JSON \u00XX (RFC 8259 section 7) and as %XX (RFC 3986 section
    // 2.1); and only the characters HTML-safe JSON encoders escape (Go's encoding/json,
    // Python's json with a safe filter), the rest as is.
    std::string every, pct, safe;
    for (char c : secret) {
        const std::string hx = text::to_hex(std::string_view(&c, 1));
        every += "\\u00" + hx;
        pct += "%" + hx;
        safe += std::string_view("<>&'=+/").find(c) != std::string_view::npos ? "\\u00" + hx
                                                                              : std::string(1, c);
    }
    add(every);
    add(safe);
    add(pct);
    add(std::string(secret.rbegin(), secret.rend())); // reversed
    // Encoded echoes: hex, and base64 / base64url at each of the three
    // alignments the secret can have inside a longer encoded blob. For a shift of k bytes
    // the first characters mix in bytes before the secret and the last one bytes after it,
    // so only the characters that depend on the secret alone are kept (RFC 4648 sections
    // 4, 5 and 8).
    add(text::to_hex(secret));
    for (std::size_t shift = 0; shift < 3; ++shift) {
        std::string raw(shift, '\0');
        raw.append(secret);
        std::string b64(4 * ((raw.size() + 2) / 3) + 1, '\0');
        const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                      reinterpret_cast<const unsigned char*>(raw.data()),
                                      static_cast<int>(raw.size()));
        b64.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
        const std::size_t first = shift == 0 ? 0 : shift + 1; // chars touching the shift
        const std::size_t full = raw.size() * 8 / 6;          // chars wholly inside raw
        if (full <= first) {
            continue;
        }
        std::string std_form = b64.substr(first, full - first);
        std::string url_form = std_form;
        std::replace(url_form.begin(), url_form.end(), '+', '-');
        std::replace(url_form.begin(), url_form.end(), '/', '_');
        add(std::move(std_form));
        add(std::move(url_form));
    }
    return forms;
}

credential_broker::credential_broker(std::vector<brokered_credential> credentials)
    : credentials_(std::move(credentials)) {
    for (const auto& c : credentials_) {
        for (auto& f : reflection_forms(c.secret)) {
            if (std::find(reflections_.begin(), reflections_.end(), f) == reflections_.end()) {
                reflections_.push_back(std::move(f));
            }
        }
    }
    reflection_index_ = std::make_shared<const reflection_set>(reflections_);
}

bool credential_broker::in_scope(const brokered_credential& c, std::string_view identity,
                                 const policy& p, std::string_view host, std::uint16_t port,
                                 std::string_view target) const {
    if (!c.path_prefix.empty() && (!target.starts_with(c.path_prefix) || !plain_path(target))) {
        return false;
    }
    if (!c.identities.empty() &&
        std::find(c.identities.begin(), c.identities.end(), identity) == c.identities.end()) {
        return false;
    }
    if (p.credentials &&
        std::find(p.credentials->begin(), p.credentials->end(), c.name) == p.credentials->end()) {
        return false;
    }
    if (std::find(c.ports.begin(), c.ports.end(), port) == c.ports.end()) {
        return false;
    }
    return std::any_of(c.hosts.begin(), c.hosts.end(),
                       [&](const std::string& pattern) { return host_matches(pattern, host); });
}

broker_result credential_broker::apply(std::string_view identity, const policy& p,
                                       std::string_view host, std::uint16_t port,
                                       std::string_view target,
                                       std::span<const broker_header> headers) const {
    broker_result r;
    if (credentials_.empty()) {
        return r;
    }
    std::vector<std::string> bad;
    auto injected = [&](std::size_t ci, std::string form) {
        note(r.credentials, credentials_[ci].name);
        if (std::find(r.injected.begin(), r.injected.end(), ci) == r.injected.end()) {
            r.injected.push_back(ci);
            r.reflections.push_back(credentials_[ci].secret);
        }
        if (!form.empty() &&
            std::find(r.reflections.begin(), r.reflections.end(), form) == r.reflections.end()) {
            r.reflections.push_back(std::move(form));
        }
    };

    // Headers.
    for (std::size_t hi = 0; hi < headers.size(); ++hi) {
        for (std::size_t ci = 0; ci < credentials_.size(); ++ci) {
            const auto& c = credentials_[ci];
            if (headers[hi].value.find(c.placeholder) == std::string_view::npos) {
                continue;
            }
            if (!c.header_name.empty() && iequals(headers[hi].name, c.header_name) &&
                in_scope(c, identity, p, host, port, target)) {
                r.header_values.emplace_back(hi, render(c.header_value_template, c.secret));
                injected(ci, {});
            } else {
                note(bad, c.name);
            }
        }
    }

    // Target: path and query, percent-decoded.
    auto contains_any = [&](std::string_view s) {
        return std::any_of(credentials_.begin(), credentials_.end(), [&](const auto& c) {
            return s.find(c.placeholder) != std::string_view::npos;
        });
    };
    // Most targets hold no placeholder, plain or percent-encoded: no URL parse for them.
    if (target.find('%') != std::string_view::npos || contains_any(target)) {
        auto parsed = boost::urls::parse_origin_form(target);
        if (!parsed) {
            for (const auto& c : credentials_) {
                if (target.find(c.placeholder) != std::string_view::npos) {
                    note(bad, c.name);
                }
            }
        } else {
            std::string path = parsed->path();
            std::string query = parsed->has_query() ? std::string(parsed->query()) : std::string();
            bool raw_hit = contains_any(target) || contains_any(path) || contains_any(query);
            if (raw_hit) {
                for (const auto& c : credentials_) {
                    if (path.find(c.placeholder) != std::string::npos) {
                        note(bad, c.name);
                    }
                }
                boost::urls::url u(*parsed);
                auto params = u.encoded_params();
                bool changed = false;
                for (auto it = params.begin(); it != params.end(); ++it) {
                    auto pv = *it;
                    std::string key = pv.key.decode();
                    std::string value = pv.has_value ? pv.value.decode() : std::string();
                    for (std::size_t ci = 0; ci < credentials_.size(); ++ci) {
                        const auto& c = credentials_[ci];
                        bool in_key = key.find(c.placeholder) != std::string::npos;
                        bool in_value = value.find(c.placeholder) != std::string::npos;
                        if (!in_key && !in_value) {
                            continue;
                        }
                        if (!in_key && !c.query_name.empty() && key == c.query_name &&
                            in_scope(c, identity, p, host, port, target)) {
                            // Copies: the views point into the URL being modified.
                            std::string key_enc(pv.key);
                            std::string enc =
                                boost::urls::encode(c.secret, boost::urls::unreserved_chars);
                            it = params.replace(it, boost::urls::param_pct_view(
                                                        boost::urls::pct_string_view(key_enc),
                                                        boost::urls::pct_string_view(enc)));
                            changed = true;
                            injected(ci, enc);
                            break; // the value is now the secret; no other placeholder left in it
                        }
                        note(bad, c.name);
                    }
                }
                if (changed) {
                    r.target = std::string(u.encoded_target());
                }
            }
        }
    }

    if (!bad.empty()) {
        r.outcome = broker_result::kind::out_of_scope;
        r.credentials = std::move(bad);
        r.header_values.clear();
        r.target.reset();
        r.injected.clear();
        r.reflections.clear();
    } else if (!r.injected.empty()) {
        r.outcome = broker_result::kind::inject;
    }
    return r;
}

namespace {

// Characters per secret byte when every byte of `form` is written as an escape: 6 for
// JSON \u00XX (RFC 8259 section 7), 3 for %XX (RFC 3986 section 2.1); else 1. Windows of
// such a form are that much wider, so each still stands for min_prefix secret bytes.
std::size_t escape_unit(std::string_view form) {
    const auto hex2 = [&](std::size_t i) {
        return std::isxdigit(static_cast<unsigned char>(form[i])) &&
               std::isxdigit(static_cast<unsigned char>(form[i + 1]));
    };
    const auto all = [&](std::size_t unit, std::string_view lead) {
        if (form.empty() || form.size() % unit != 0)
            return false;
        for (std::size_t i = 0; i < form.size(); i += unit)
            if (form.substr(i, lead.size()) != lead || !hex2(i + lead.size()))
                return false;
        return true;
    };
    return all(6, "\\u00") ? 6 : all(3, "%") ? 3 : 1;
}

std::string folded(std::string_view v) {
    std::string out(v);
    for (auto& c : out)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

} // namespace

reflection_set::reflection_set(std::vector<std::string> secrets) {
    std::vector<std::string> literals;
    std::unordered_set<std::string> seen; // windows, case-folded (they match caselessly)
    for (auto& s : secrets) {
        if (s.empty())
            continue;
        const auto form = static_cast<std::uint32_t>(secrets_.size());
        longest_ = std::max(longest_, s.size());
        const std::size_t unit = escape_unit(s);
        const std::size_t width = std::min(s.size(), unit * secret_masker::min_prefix);
        const std::size_t stride = unit * window_stride;
        longest_window_ = std::max(longest_window_, width);
        lead_ = std::max(lead_, stride - 1);
        // Windows at every stride, and the last one: a piece of at least width + stride - 1
        // characters always holds a whole window; the prefix and the end are exact.
        for (std::size_t k = 0; k + width <= s.size();) {
            if (seen.insert(folded(std::string_view(s).substr(k, width))).second) {
                literals.push_back(s.substr(k, width));
                windows_.push_back(
                    {form, static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(width)});
            }
            if (k + width == s.size())
                break;
            k = std::min(k + stride, s.size() - width);
        }
        secrets_.push_back(std::move(s));
    }
    if (literals.empty())
        return;
    // Every match, overlapping ones too; case is ignored, so a re-cased echo is hidden.
    // Literals (no regex syntax, any bytes, none empty): compiling fails only for lack
    // of memory.
    auto set = detectors::literal_set::compile(literals, {.caseless = true});
    if (!set)
        throw std::bad_alloc();
    set_ = std::move(*set);
}

reflection_set::~reflection_set() = default;

namespace {

struct match_ctx {
    const reflection_set* set;
    std::string_view text;
    std::size_t starts_before;
    std::vector<std::pair<std::size_t, std::size_t>>* ranges;
};

bool same_folded(char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
}

int on_window(void* p, unsigned id, std::size_t end) {
    auto& m = *static_cast<match_ctx*>(p);
    const auto& w = m.set->window_of(id);
    const std::string& form = m.set->secrets()[w.form];
    std::size_t at = end - w.width;
    // The run of the text that follows the form around this window, both ways.
    for (std::size_t k = w.offset; k > 0 && at > 0 && same_folded(m.text[at - 1], form[k - 1]); --k)
        --at;
    for (std::size_t k = w.offset + w.width;
         k < form.size() && end < m.text.size() && same_folded(m.text[end], form[k]); ++k)
        ++end;
    if (at < m.starts_before) // the run, not the window, must begin before it
        m.ranges->emplace_back(at, end);
    return 0;
}

} // namespace

// A window of a form, extended both ways as far as the text follows that form: the
// whole echo, or any piece of it long enough to hold a window (cut short by the origin,
// split by a space, the end of the body).
void reflection_set::occurrences(std::string_view text, std::size_t starts_before,
                                 std::vector<std::pair<std::size_t, std::size_t>>& ranges) const {
    if (!set_ || text.empty() || starts_before == 0)
        return;
    match_ctx m{this, text, starts_before, &ranges};
    // A run that begins before starts_before holds a window that begins within lead()
    // bytes after it, so the text past the last such window is never scanned.
    const std::size_t reach = std::min(text.size(), starts_before - 1 + lead_ + longest_window_);
    if (!set_->scan(text.substr(0, reach), on_window, &m))
        throw std::bad_alloc(); // only a scratch or database fault, never the input
}

secret_masker::secret_masker(std::vector<std::string_view> secrets)
    : secret_masker(std::make_shared<const reflection_set>(
          std::vector<std::string>(secrets.begin(), secrets.end()))) {}

secret_masker::secret_masker(std::shared_ptr<const reflection_set> set)
    : set_(std::move(set))
    , longest_(set_ ? set_->longest() : 0) {}

namespace {

// Stars the part of every range that lies in `out`; returns the bytes starred that were
// not '*' already, and the end of the furthest range in `reach` (may lie past out).
std::size_t star(const std::vector<std::pair<std::size_t, std::size_t>>& ranges, std::string& out,
                 std::size_t& reach) {
    std::size_t added = 0;
    reach = 0;
    for (auto [b, e] : ranges) {
        for (std::size_t k = b; k < std::min(e, out.size()); ++k) {
            added += out[k] != '*';
            out[k] = '*';
        }
        reach = std::max(reach, e);
    }
    return added;
}

} // namespace

// Masking is the union of every occurrence of every secret found in the original bytes,
// so overlapping secrets (one a prefix of another) are hidden completely and the result
// does not depend on the order of the secrets or on where the body was split.
std::size_t secret_masker::mask(std::string& value) const {
    if (!active())
        return 0;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    set_->occurrences(value, value.size(), ranges);
    if (ranges.empty())
        return 0;
    std::size_t reach = 0;
    return star(ranges, value, reach);
}

std::string_view secret_masker::feed(std::string_view data, bool last) {
    if (!active())
        return data;
    pending_.append(data);
    // Runs beginning before the held-back tail lie wholly inside pending_, and so does the
    // window that finds them (the tail is the longest secret - 1 plus the set's lead), and
    // are decided now; ones beginning in the tail wait for more bytes. pending_ keeps the
    // original bytes, so the next call sees them unmasked.
    const std::size_t hold = last ? 0 : std::min(pending_.size(), longest_ - 1 + set_->lead());
    const std::size_t emit = pending_.size() - hold;
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    set_->occurrences(pending_, emit, ranges);
    if (ranges.empty() && carry_ == 0) {
        // Nothing to hide (the common case): the emitted bytes are not copied again;
        // out_ takes pending_'s buffer and pending_ keeps only the tail.
        out_.assign(pending_, emit, hold);
        pending_.swap(out_);
        out_.resize(emit);
        return out_;
    }
    if (carry_ > 0)
        ranges.emplace_back(0, carry_);
    out_.assign(pending_, 0, emit);
    std::size_t reach = 0;
    masked_ += star(ranges, out_, reach);
    carry_ = reach > emit ? reach - emit : 0;
    pending_.erase(0, emit);
    return out_;
}

} // namespace sluice::dlp
