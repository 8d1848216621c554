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

std::string scrubbed(const flow_context& fc, std::string_view text) {
    dlp::variant_options vo;
    vo.protect = fc.gen->protect;
    return dlp::redact_secrets(text, thread_scanner(fc.gen->settings->rules), vo);
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

} // namespace sluice::proxy
