#include "sluice/proxy/log_limiter.hpp"

#include "sluice/detectors/text.hpp"

#include <spdlog/details/log_msg.h>
#include <spdlog/pattern_formatter.h>

#include <algorithm>

namespace sluice::proxy {

namespace {

// %* in a pattern: the message as the inside of a JSON string.
class json_message_flag : public spdlog::custom_flag_formatter {
public:
    void format(const spdlog::details::log_msg& msg, const std::tm&,
                spdlog::memory_buf_t& dest) override {
        constexpr const char* hex = text::hex_lower;
        for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
            auto u = static_cast<unsigned char>(c);
            if (c == '"' || c == '\\') {
                dest.push_back('\\');
                dest.push_back(c);
            } else if (c == '\n') {
                dest.append(std::string_view("\\n"));
            } else if (c == '\r') {
                dest.append(std::string_view("\\r"));
            } else if (c == '\t') {
                dest.append(std::string_view("\\t"));
            } else if (u < 0x20 || u == 0x7f) {
                const char esc[] = {'\\', 'u', '0', '0', hex[u >> 4], hex[u & 0xf]};
                dest.append(esc, esc + sizeof esc);
            } else {
                dest.push_back(c);
            }
        }
    }
    std::unique_ptr<custom_flag_formatter> clone() const override {
        return std::make_unique<json_message_flag>();
    }
};

} // namespace

std::unique_ptr<spdlog::formatter> make_log_formatter(bool json) {
    auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    if (json) {
        f->add_flag<json_message_flag>('*');
        f->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","msg":"%*"})");
    } else {
        f->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v");
    }
    return f;
}

rate_limited_sink::rate_limited_sink(spdlog::sink_ptr inner, double rate, double burst)
    : inner_(std::move(inner))
    , rate_(rate)
    , burst_(burst)
    , tokens_(burst)
    , last_(std::chrono::steady_clock::now())
    , last_summary_(last_ - summary_window) {}

std::uint64_t rate_limited_sink::suppressed_total() const {
    std::lock_guard lock(const_cast<std::mutex&>(mutex_));
    return suppressed_total_;
}

void rate_limited_sink::sink_it_(const spdlog::details::log_msg& msg) {
    auto now = std::chrono::steady_clock::now();
    tokens_ =
        std::min(burst_, tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
    last_ = now;
    if (tokens_ < 1.0) {
        ++suppressed_;
        ++suppressed_total_;
        return;
    }
    tokens_ -= 1.0;
    // One summary per window: under a sustained flood the bucket lets a line through every
    // 1/rate seconds, and a summary before each would double the lines.
    if (suppressed_ > 0 && now - last_summary_ >= summary_window) {
        last_summary_ = now;
        std::string text = std::to_string(suppressed_) + " log messages suppressed (rate limit)";
        spdlog::details::log_msg note(msg.logger_name, spdlog::level::warn, text);
        inner_->log(note);
        suppressed_ = 0;
    }
    inner_->log(msg);
}

void rate_limited_sink::flush_() {
    inner_->flush();
}

void rate_limited_sink::set_pattern_(const std::string& pattern) {
    inner_->set_pattern(pattern);
}

void rate_limited_sink::set_formatter_(std::unique_ptr<spdlog::formatter> f) {
    inner_->set_formatter(std::move(f));
}

} // namespace sluice::proxy
