#include "flow_context.hpp"

#include "sluice/dlp/redact.hpp"
#include "sluice/dlp/variants.hpp"

#include <cstdio>
#include <optional>

namespace sluice::proxy {

detectors::scanner& thread_scanner(const std::shared_ptr<const detectors::ruleset>& rules) {
    thread_local std::shared_ptr<const detectors::ruleset> cached_rules;
    thread_local std::optional<detectors::scanner> cached;
    if (!cached || cached_rules != rules) {
        cached.reset();
        cached.emplace(rules);
        cached_rules = rules;
    }
    return *cached;
}

bool refresh_generation(flow_context& fc) {
    auto live = fc.state->current.load();
    if (live == fc.gen)
        return fc.policy != nullptr;
    fc.gen = std::move(live);
    fc.policy = nullptr;
    if (fc.evidence) {
        auto who = dlp::resolve_caller(fc.gen->settings->identities, *fc.evidence);
        if (!who.identity || *who.identity != fc.identity)
            return false;
    }
    fc.policy = dlp::policy_for(fc.gen->settings->policies, fc.identity);
    return fc.policy != nullptr;
}

std::string make_flow_id(shared_state& st) {
    std::uint64_t n = st.next_flow.fetch_add(1, std::memory_order_relaxed);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%08llx-%06llx",
                  static_cast<unsigned long long>(st.flow_salt & 0xffffffffu),
                  static_cast<unsigned long long>(n & 0xffffff));
    return buf;
}

std::uint64_t elapsed_ms(std::chrono::steady_clock::time_point since) {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::steady_clock::now() - since)
                                          .count());
}

double seconds_since(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

namespace {
constexpr std::size_t max_scrub_memo = 2048; // bytes of text the memo keeps
} // namespace

std::string scrubbed(const flow_context& fc, std::string_view text) {
    // The same generation (rules, protected values) and the same text give the same
    // result. Owner comparison: a freed generation's address may be reused, its control
    // block may not while the memo holds it.
    auto& memo = fc.last_scrub;
    if (!memo.gen.owner_before(fc.gen) && !fc.gen.owner_before(memo.gen) && !memo.gen.expired() &&
        text == memo.in)
        return memo.out;
    dlp::variant_options vo;
    vo.protect = fc.gen->protect;
    std::string out = dlp::redact_secrets(text, thread_scanner(fc.gen->settings->rules), vo);
    if (text.size() <= max_scrub_memo) { // a long url is not kept twice per idle flow
        memo.gen = fc.gen;
        memo.in.assign(text);
        memo.out = out;
    }
    return out;
}

bool killed_now(const flow_context& fc) {
    const auto& ctl = fc.state->ctl;
    return ctl && ((fc.handle && fc.handle->killed()) || ctl->is_killed(fc.identity));
}

std::string_view kill_reason(const flow_context& fc) {
    if (fc.handle && fc.handle->killed() && !fc.handle->cut_reason().empty() &&
        !fc.state->ctl->is_killed(fc.identity))
        return fc.handle->cut_reason();
    return "killed";
}

unsigned kill_status(const flow_context& fc) {
    return kill_reason(fc) == "killed" ? 503 : 403;
}

void abort_socket(tcp::socket& s) {
    boost::system::error_code ignored;
    // linger(true, 0): close() discards unsent data and resets the connection (tcp(7)).
    s.set_option(net::socket_base::linger(true, 0), ignored);
    s.close(ignored);
}

} // namespace sluice::proxy
