// The exchange's protocol-neutral steps (proxy/src/exchange.hpp) on a real flow context:
// a configuration loaded from YAML, a real audit log in a temporary directory, the
// built-in detectors. No socket: the steps never touch one, which is what makes them
// testable one by one (the HTTP/1.1 front end that runs them is covered end to end).
#include "exchange.hpp"
#include "generation.hpp"

#include "../dlp/test_support.hpp"

#include "sluice/config/settings.hpp"
#include "sluice/proxy/certificate_authority.hpp"

#include <boost/beast/http/string_body.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

namespace {

namespace fs = std::filesystem;
namespace http = boost::beast::http;
using namespace sluice::proxy;

constexpr std::string_view policy_yaml = R"(version: 1
listeners:
  - address: 127.0.0.1:3128
identities:
  - name: agent
    source_cidrs: [127.0.0.0/8]
policies:
  - identity: agent
    rules:
      - hosts: [api.example.com]
        methods: [GET]
        path_prefix: /admin
        action: deny
      - hosts: [api.example.com]
        path_prefix: /hold
        action: supervise
      - hosts: [api.example.com]
        action: allow
    dlp: {detectors: [all], on_finding: deny, max_body: 1KiB, large_bodies: LARGE}
    limits: {requests_per_minute: RPM, upload_per_minute: 4KiB}
credentials:
  - name: example
    placeholder: "sluice:example"
    source: {env: SLUICE_STEPS_TEST_SECRET}
    hosts: [api.example.com]
    header: {name: Authorization, value: "Bearer {secret}"}
)";

std::string config_text(std::string_view large, std::string_view rpm) {
    std::string y(policy_yaml);
    y.replace(y.find("LARGE"), 5, large);
    y.replace(y.find("RPM"), 3, rpm);
    return y;
}

std::shared_ptr<const generation> make_gen(const std::string& yaml) {
    auto s = sluice::config::load_string(yaml, "steps.yml");
    if (!s) {
        for (const auto& d : s.error())
            ADD_FAILURE() << d.line << ":" << d.column << ": " << d.message;
        return nullptr;
    }
    // The server's own mapping: the broker and the protected values (the brokered secret
    // among them) as a reload would build them.
    auto gen = make_generation(std::make_shared<const sluice::config::settings>(std::move(*s)));
    if (!gen) {
        ADD_FAILURE() << gen.error();
        return nullptr;
    }
    return *gen;
}

class exchange_steps : public ::testing::Test {
protected:
    void SetUp() override { start("deny", "600"); }

    void start(std::string_view large, std::string_view rpm) {
        ::setenv("SLUICE_STEPS_TEST_SECRET", "real-secret-value-0123456789", 1);
        dir_ =
            fs::temp_directory_path() / ("sluice-steps-" + std::to_string(std::random_device{}()));
        fs::create_directories(dir_);
        state_ = std::make_shared<shared_state>();
        state_->current.store(make_gen(config_text(large, rpm)));
        auto log = audit_log::open(dir_ / "audit.jsonl", false);
        ASSERT_TRUE(log.has_value()) << log.error();
        state_->audit = std::move(*log);
        evidence_.source = sluice::dlp::ip_address::parse("127.0.0.1");
        fc_ = flow_context{};
        fc_.state = state_;
        fc_.gen = state_->current.load();
        fc_.flow = "steps-1";
        fc_.identity = "agent";
        fc_.evidence = &evidence_;
        fc_.policy = sluice::dlp::policy_for(fc_.gen->settings->policies, "agent");
        ASSERT_NE(fc_.policy, nullptr);
        dest_.host = "api.example.com";
        dest_.port = 443;
    }
    void TearDown() override {
        state_.reset();
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }

    // An exchange for `method target` as the HTTP/1.1 front end would begin it.
    exchange begin(std::string method, std::string target, std::optional<std::uint64_t> length) {
        tgt_.scheme = "https";
        tgt_.dest = &dest_;
        tgt_.origin_form = std::move(target);
        tgt_.host_header = "api.example.com";
        exchange ex;
        ex.tgt = &tgt_;
        ex.method = std::move(method);
        ex.url_prefix = "https://api.example.com";
        ex.client_keep_alive = true;
        ex.declared_length = length;
        ex.no_payload = length.value_or(0) == 0;
        ex.rec.method = ex.method;
        ex.rec.url = ex.url_prefix + tgt_.origin_form;
        return ex;
    }

    http::request<http::string_body> request(std::string_view method, std::string_view target,
                                             std::string body) {
        http::request<http::string_body> req;
        req.method_string(method);
        req.target(target);
        req.set(http::field::host, "api.example.com");
        req.body() = std::move(body);
        req.prepare_payload();
        return req;
    }

    fs::path dir_;
    std::shared_ptr<shared_state> state_;
    sluice::dlp::caller_evidence evidence_;
    flow_context fc_;
    destination dest_;
    exchange_target tgt_;
};

TEST_F(exchange_steps, admit_refuses_an_identity_a_reload_no_longer_resolves) {
    auto moved = config_text("deny", "600");
    moved.replace(moved.find("127.0.0.0/8"), 11, "10.0.0.0/8");
    state_->current.store(make_gen(moved));
    auto ex = begin("GET", "/v1/models?key=abc", std::nullopt);
    auto r = admit(fc_, ex);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403u);
    EXPECT_EQ(r->reason, "policy_deny");
    EXPECT_FALSE(r->keep_alive);
    EXPECT_EQ(ex.rec.url.find("abc"), std::string::npos) << ex.rec.url; // query redacted
}

TEST_F(exchange_steps, admit_counts_requests_and_answers_429_with_retry_after) {
    start("deny", "1");
    auto first = begin("GET", "/v1/models", std::nullopt);
    EXPECT_FALSE(admit(fc_, first));
    auto second = begin("GET", "/v1/models", std::nullopt);
    auto r = admit(fc_, second);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429u);
    EXPECT_EQ(r->reason, "rate_limit");
    EXPECT_GT(r->retry_after, 0u);
    EXPECT_TRUE(r->keep_alive); // nothing of this request is left to read
}

TEST_F(exchange_steps, admit_charges_a_declared_upload_before_it_is_read) {
    auto big = begin("POST", "/v1/upload", 5 * 1024);
    auto r = admit(fc_, big);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->reason, "upload_budget");
    EXPECT_FALSE(r->keep_alive);
}

TEST_F(exchange_steps, charge_upload_counts_a_body_of_unknown_length_once_read) {
    auto ex = begin("POST", "/v1/chunked", std::nullopt);
    ASSERT_FALSE(admit(fc_, ex));
    EXPECT_FALSE(ex.upload_charged);
    auto r = charge_upload(fc_, ex, 5 * 1024);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->reason, "upload_budget");
}

TEST_F(exchange_steps, route_applies_method_and_path_rules) {
    http::request_header<> head;
    auto denied = begin("GET", "/admin/users", std::nullopt);
    auto r = route(fc_, denied, head);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403u);
    EXPECT_EQ(r->reason, "policy_deny");
    EXPECT_TRUE(r->keep_alive);

    auto held = begin("POST", "/hold/this", 10);
    EXPECT_FALSE(route(fc_, held, head));
    EXPECT_EQ(held.supervise_reason, "policy_supervise");
    EXPECT_TRUE(held.inspect);

    auto other = begin("GET", "/elsewhere", std::nullopt);
    dest_.host = "elsewhere.example";
    ASSERT_TRUE(route(fc_, other, head));
}

TEST_F(exchange_steps, route_refuses_a_declared_body_over_the_limit_unless_it_streams) {
    http::request_header<> head;
    auto big = begin("POST", "/v1/upload", 2048);
    auto r = route(fc_, big, head);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413u);
    EXPECT_EQ(r->reason, "body_too_large");

    start("stream", "600");
    auto streamed = begin("POST", "/v1/upload", 2048);
    EXPECT_FALSE(route(fc_, streamed, head));
    EXPECT_TRUE(streamed.streamed);

    // A coded body cannot stream (a compressed stream is only decoded when identity-coded
    // bytes carry it), nor can a held one.
    http::request_header<> gz;
    gz.set(http::field::content_encoding, "gzip");
    auto coded = begin("POST", "/v1/upload", 2048);
    ASSERT_TRUE(route(fc_, coded, gz));
    auto held = begin("POST", "/hold/upload", 2048);
    ASSERT_TRUE(route(fc_, held, head));
}

TEST_F(exchange_steps, inspect_request_denies_a_token_in_the_body_and_redacts_the_url) {
    const auto token = sluice::dlp::test::rule_example("github-pat-classic");
    http::request_header<> head;
    auto ex = begin("POST", "/v1/chat?q=" + token, 20);
    ASSERT_FALSE(route(fc_, ex, head));
    auto req = request("POST", tgt_.origin_form, "{\"t\":\"" + token + "\"}");
    auto r = inspect_request(fc_, ex, req);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403u);
    EXPECT_EQ(r->reason, "dlp_finding");
    // A head that denies is not followed by the body scan: the url's finding decides.
    ASSERT_FALSE(ex.findings.empty());
    EXPECT_EQ(ex.findings.front().location, "url");
    EXPECT_EQ(ex.rec.url.find(token), std::string::npos) << ex.rec.url;
    EXPECT_NE(ex.rec.url.find("[redacted]"), std::string::npos) << ex.rec.url;
}

TEST_F(exchange_steps, inspect_request_scans_the_body_of_a_clean_head) {
    const auto token = sluice::dlp::test::rule_example("github-pat-classic");
    http::request_header<> head;
    auto ex = begin("POST", "/v1/chat", 20);
    ASSERT_FALSE(route(fc_, ex, head));
    auto req = request("POST", "/v1/chat", "{\"t\":\"" + token + "\"}");
    auto r = inspect_request(fc_, ex, req);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->reason, "dlp_finding");
    ASSERT_FALSE(ex.findings.empty());
    EXPECT_EQ(ex.findings.front().location, "body");
    EXPECT_TRUE(r->keep_alive); // the body was read: the connection can go on
}

TEST_F(exchange_steps, inspect_request_lets_a_clean_request_through_inspected) {
    http::request_header<> head;
    auto ex = begin("POST", "/v1/chat", 20);
    ASSERT_FALSE(route(fc_, ex, head));
    auto req = request("POST", "/v1/chat", "{\"q\":\"hello there\"}");
    EXPECT_FALSE(inspect_request(fc_, ex, req));
    EXPECT_TRUE(ex.rec.inspected);
    EXPECT_TRUE(ex.findings.empty());
}

TEST_F(exchange_steps, prepare_forward_drops_hop_by_hop_fields_and_injects_credentials) {
    http::request_header<> head;
    auto ex = begin("POST", "/v1/chat", 5);
    ASSERT_FALSE(route(fc_, ex, head));
    auto req = request("POST", "/v1/chat", "hello");
    req.set(http::field::connection, "keep-alive, X-Internal");
    req.set("X-Internal", "drop me");
    req.set(http::field::proxy_authorization, "Basic eHg6eXk=");
    req.set("X-Sluice-Debug", "1");
    req.set(http::field::authorization, "Bearer sluice:example");
    forward_plan plan;
    ASSERT_FALSE(prepare_forward(fc_, ex, req, plan));
    const auto& out = plan.out;
    EXPECT_EQ(out.count("X-Internal"), 0u);
    EXPECT_EQ(out.count(http::field::proxy_authorization), 0u);
    EXPECT_EQ(out.count("X-Sluice-Debug"), 0u);
    EXPECT_EQ(out[http::field::host], "api.example.com");
    EXPECT_EQ(out[http::field::authorization], "Bearer real-secret-value-0123456789");
    EXPECT_EQ(out.body(), "hello");
    ASSERT_TRUE(plan.masker);
    EXPECT_TRUE(plan.masker->active());
    ASSERT_EQ(ex.rec.credentials.size(), 1u);
}

TEST_F(exchange_steps, prepare_forward_keeps_a_secret_off_plain_http) {
    http::request_header<> head;
    auto ex = begin("GET", "/v1/models", std::nullopt);
    tgt_.scheme = "http";
    ASSERT_FALSE(route(fc_, ex, head));
    auto req = request("GET", "/v1/models", "");
    req.set(http::field::authorization, "Bearer sluice:example");
    forward_plan plan;
    auto r = prepare_forward(fc_, ex, req, plan);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->reason, "credential_scope");
    EXPECT_EQ(plan.out[http::field::authorization].find("real-secret"), std::string_view::npos);
}

} // namespace

// scrubbed() keeps its last answer for the next record of the exchange, but never across
// a configuration: a value the new generation protects is redacted in a text the old one
// let through, even when the old generation is gone and its memory reused.
TEST_F(exchange_steps, scrubbed_follows_the_generation_of_the_flow) {
    const std::string text = "https://api.example.com/x?k=second-secret-value-9876543210";
    EXPECT_EQ(scrubbed(fc_, text), text);
    EXPECT_EQ(scrubbed(fc_, text), text); // from the memo
    ::setenv("SLUICE_STEPS_TEST_SECRET", "second-secret-value-9876543210", 1);
    state_->current.store(nullptr);
    fc_.gen = nullptr; // the old generation is freed
    fc_.gen = make_gen(config_text("deny", "600"));
    ASSERT_NE(fc_.gen, nullptr);
    fc_.policy = sluice::dlp::policy_for(fc_.gen->settings->policies, "agent");
    const std::string now = scrubbed(fc_, text);
    EXPECT_EQ(now.find("second-secret-value"), std::string::npos) << now;
    EXPECT_EQ(scrubbed(fc_, text), now);
}
