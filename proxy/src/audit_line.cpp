// One audit record as a line of JSON (audit_log.hpp "Format"), built without a DOM: every
// exchange writes two records (its start and its completion), so this is on the request
// path of the log's writer thread. The bytes are what boost::json::serialize writes for
// the same object in the same member order (RFC 8259: no whitespace, strings escaped by
// Boost.JSON's serializer), which audit_log_test checks by re-serialising parsed lines
// (lines_are_canonical_json_with_every_member_and_escape).
#include "sluice/proxy/audit_log.hpp"
#include "sluice/proxy/control.hpp"

#include "audit_hash.hpp"

#include <boost/json/serializer.hpp>

#include <array>
#include <charconv>
#include <chrono>

namespace sluice::proxy {

namespace {

// Appends members and values to `out`. Names are the record's fixed ASCII keys; values
// that are strings go through Boost.JSON (escapes of RFC 8259 section 7).
class json_line {
public:
    explicit json_line(std::string& out)
        : out_(out) {}

    void open(char c) {
        out_ += c;
        first_ = true;
    }
    void close(char c) {
        out_ += c;
        first_ = false;
    }
    json_line& key(std::string_view k) {
        item();
        out_ += '"';
        out_ += k;
        out_ += "\":";
        first_ = true; // the value follows without a comma
        return *this;
    }
    // Before an array element (a value in an object follows its key).
    void item() {
        if (!first_)
            out_ += ',';
        first_ = false;
    }
    void str(std::string_view s) {
        first_ = false;
        if (plain(s)) {
            out_ += '"';
            out_ += s;
            out_ += '"';
            return;
        }
        boost::json::serializer sr;
        sr.reset(s);
        std::array<char, 256> buf;
        while (!sr.done())
            out_ += sr.read(buf.data(), buf.size());
    }
    void num(std::uint64_t v) {
        first_ = false;
        std::array<char, 24> buf;
        auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
        out_.append(buf.data(), end);
    }
    void boolean(bool b) {
        first_ = false;
        out_ += b ? "true" : "false";
    }
    void null() {
        first_ = false;
        out_ += "null";
    }

private:
    // Nothing Boost.JSON would escape: '"', '\\' and control characters below 0x20.
    static bool plain(std::string_view s) {
        for (unsigned char c : s)
            if (c < 0x20 || c == '"' || c == '\\')
                return false;
        return true;
    }

    std::string& out_;
    bool first_ = true;
};

void put_findings(json_line& j, const std::vector<audit_finding>& findings) {
    j.key("findings").open('[');
    for (const auto& f : findings) {
        j.item();
        j.open('{');
        j.key("rule").str(f.rule);
        j.key("location").str(f.location);
        j.key("variant").str(f.variant);
        j.key("offset").num(f.offset);
        j.key("fingerprint").str(f.fingerprint);
        j.close('}');
    }
    j.close(']');
}

// Everything after "findings": present only where the record says so.
void put_tail(json_line& j, const audit_record& r) {
    if (!r.credentials.empty()) {
        j.key("credentials").open('[');
        for (const auto& c : r.credentials) {
            j.item();
            j.str(c);
        }
        j.close(']');
    }
    if (r.masked_bytes > 0)
        j.key("masked_bytes").num(r.masked_bytes);
    if (r.websocket) {
        j.key("ws_messages_up").num(r.ws_messages_up);
        j.key("ws_messages_down").num(r.ws_messages_down);
    }
    j.key("bytes_up").num(r.bytes_up);
    j.key("bytes_down").num(r.bytes_down);
    j.key("duration_ms").num(r.duration_ms);
    if (r.approval) {
        j.key("approval").open('{');
        j.key("id").str(r.approval->id);
        j.key("by").str(r.approval->by);
        j.key("at").str(r.approval->at);
        if (!r.approval->reason.empty())
            j.key("reason").str(r.approval->reason);
        j.close('}');
    }
}

} // namespace

std::string audit_log::line_for(const audit_record& r, std::uint64_t seq, const std::string& prev,
                                std::string_view replica, std::string& hash) {
    std::string body;
    body.reserve(512 + r.url.size() + 160 * r.findings.size());
    json_line j(body);
    j.open('{');
    j.key("ts").str(rfc3339_ms(std::chrono::system_clock::now()));
    j.key("seq").num(seq);
    if (!replica.empty())
        j.key("replica").str(replica);
    if (!r.event.empty())
        j.key("event").str(r.event);
    if (r.completes != 0)
        j.key("completes").num(r.completes);
    j.key("flow").str(r.flow);
    if (r.identity.empty())
        j.key("identity").null();
    else
        j.key("identity").str(r.identity);
    j.key("source").str(r.source);
    j.key("method").str(r.method);
    j.key("url").str(r.url);
    j.key("decision").str(r.decision);
    j.key("reason").str(r.reason);
    j.key("inspected").boolean(r.inspected);
    put_findings(j, r.findings);
    put_tail(j, r);
    j.key("prev").str(prev);
    j.close('}');
    // The hash covers the record without its own "hash" member (always last), so a
    // verifier hashes the line up to that member plus '}' (audit_hash.hpp).
    hash = detail::sha256_hex(body);
    body.pop_back(); // '}'
    body += detail::hash_key;
    body += hash;
    body += "\"}\n";
    return body;
}

} // namespace sluice::proxy
