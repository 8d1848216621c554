// Addresses, CIDRs, host normalisation and matching, first-match rules, identity
// resolution and policy lookup.
#include "sluice/dlp/policy.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

using namespace sluice::dlp;

namespace {

ip_address ip(std::string_view s) {
    auto a = ip_address::parse(s);
    EXPECT_TRUE(a.has_value()) << s;
    return a.value_or(ip_address{});
}

cidr net(std::string_view s) {
    auto c = cidr::parse(s);
    EXPECT_TRUE(c.has_value()) << s;
    return c.value_or(cidr{});
}

} // namespace

TEST(ip_address, parses_v4_and_v6) {
    auto v4 = ip("192.0.2.1");
    EXPECT_TRUE(v4.is_v4());
    EXPECT_EQ(v4.to_string(), "192.0.2.1");
    EXPECT_EQ(v4.bytes[10], 0xff);
    EXPECT_EQ(v4.bytes[15], 1);

    auto v6 = ip("2001:DB8:0:0::1");
    EXPECT_FALSE(v6.is_v4());
    EXPECT_EQ(v6.to_string(), "2001:db8::1");
    EXPECT_EQ(ip("::").to_string(), "::");
    EXPECT_EQ(ip("::1").to_string(), "::1");
    // IPv4-mapped text is the same address as the IPv4 literal.
    EXPECT_EQ(ip("::ffff:10.0.0.1"), ip("10.0.0.1"));
    EXPECT_EQ(ip("::ffff:10.0.0.1").to_string(), "10.0.0.1");
    EXPECT_EQ(ip("64:ff9b::10.0.0.1").to_string(), "64:ff9b::a00:1");
}

TEST(ip_address, rejects_malformed) {
    for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.4 ",
                            " 1.2.3.4", "0x7f.0.0.1", "2130706433", "[::1]", "fe80::1%eth0",
                            "1:2:3:4:5:6:7:8:9", "::g", "gggg::", "1.2.3.4/8", "localhost"}) {
        EXPECT_FALSE(ip_address::parse(bad).has_value()) << bad;
    }
    EXPECT_FALSE(ip_address::parse(std::string_view("1.2.3.4\0", 8)).has_value());
    EXPECT_FALSE(ip_address::parse(std::string(100, '1')).has_value());
}

TEST(cidr, parse_and_contains) {
    auto c = net("10.0.0.0/8");
    EXPECT_EQ(c.prefix_len, 104u);
    EXPECT_TRUE(c.contains(ip("10.255.1.2")));
    EXPECT_FALSE(c.contains(ip("11.0.0.0")));
    EXPECT_TRUE(c.contains(ip("::ffff:10.1.1.1")));

    auto odd = net("172.16.0.0/12");
    EXPECT_TRUE(odd.contains(ip("172.31.255.255")));
    EXPECT_FALSE(odd.contains(ip("172.32.0.0")));
    EXPECT_FALSE(odd.contains(ip("172.15.255.255")));

    auto host_bits = net("10.1.2.3/8"); // host bits cleared
    EXPECT_EQ(host_bits.network, ip("10.0.0.0"));
    EXPECT_TRUE(host_bits.contains(ip("10.9.9.9")));

    auto v6 = net("fd00::/8");
    EXPECT_EQ(v6.prefix_len, 8u);
    EXPECT_TRUE(v6.contains(ip("fd12:3456::1")));
    EXPECT_FALSE(v6.contains(ip("fc00::1")));
    EXPECT_FALSE(v6.contains(ip("10.0.0.1")));

    auto v6odd = net("2001:db8::/33");
    EXPECT_TRUE(v6odd.contains(ip("2001:db8:7fff::1")));
    EXPECT_FALSE(v6odd.contains(ip("2001:db8:8000::1")));

    auto single = net("192.0.2.7");
    EXPECT_EQ(single.prefix_len, 128u);
    EXPECT_TRUE(single.contains(ip("192.0.2.7")));
    EXPECT_FALSE(single.contains(ip("192.0.2.8")));

    auto all4 = net("0.0.0.0/0");
    EXPECT_TRUE(all4.contains(ip("203.0.113.9")));
    EXPECT_FALSE(all4.contains(ip("2001:db8::1"))); // /0 over IPv4 is ::ffff:0:0/96
    auto all6 = net("::/0");
    EXPECT_TRUE(all6.contains(ip("2001:db8::1")));
    EXPECT_TRUE(all6.contains(ip("1.2.3.4")));

    for (const char* bad : {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8",
                            "10.0.0.0/08a", "/8", "bogus/8", "10.0.0.0/0008", "10.0.0.0 /8"}) {
        EXPECT_FALSE(cidr::parse(bad).has_value()) << bad;
    }
}

TEST(private_destination, table) {
    struct row {
        const char* addr;
        bool priv;
    };
    const row rows[] = {
        {"127.0.0.1", true},
        {"127.255.255.254", true},
        {"0.0.0.0", true},
        {"0.1.2.3", true},
        {"10.0.0.1", true},
        {"172.16.0.1", true},
        {"172.31.255.255", true},
        {"172.15.0.1", false},
        {"172.32.0.1", false},
        {"192.168.1.1", true},
        {"192.169.1.1", false},
        {"169.254.169.254", true}, // cloud metadata
        {"100.64.0.1", true},
        {"100.127.255.255", true},
        {"100.128.0.1", false},
        {"100.63.255.255", false},
        {"224.0.0.1", true},
        {"239.255.255.255", true},
        {"240.0.0.1", true},
        {"255.255.255.255", true},
        {"8.8.8.8", false},
        {"1.1.1.1", false},
        {"93.184.216.34", false},
        {"::", true},
        {"::1", true},
        {"fc00::1", true},
        {"fd00:ec2::254", true}, // AWS IMDS over IPv6
        {"fe80::1", true},
        {"febf::1", true},
        {"ff02::1", true},
        {"2001:4860:4860::8888", false},
        {"2606:4700:4700::1111", false},
        {"::ffff:127.0.0.1", true},
        {"::ffff:169.254.169.254", true},
        {"::ffff:8.8.8.8", false},
        {"::127.0.0.1", true}, // deprecated IPv4-compatible
        {"64:ff9b::127.0.0.1", true},
        {"64:ff9b::10.1.2.3", true},
        {"64:ff9b::8.8.8.8", false},
        {"64:ff9b:1::1", true},
        {"2002:7f00:0001::1", true},                     // 6to4 of 127.0.0.1
        {"2002:0a00:0001::1", true},                     // 6to4 of 10.0.0.1
        {"2002:0808:0808::1", false},                    // 6to4 of 8.8.8.8
        {"2001:0:4136:e378:8000:63bf:80ff:fffe", true},  // Teredo client 127.0.0.1 (inverted)
        {"2001:0:4136:e378:8000:63bf:f7f7:f7f7", false}, // Teredo client 8.8.8.8
        // IANA IPv4 Special-Purpose Address Registry, not globally reachable.
        {"192.0.0.1", true},   // DS-Lite B4 192.0.0.0/29
        {"192.0.0.8", true},   // IPv4 dummy address
        {"192.0.0.170", true}, // NAT64/DNS64 discovery
        {"192.0.0.255", true},
        {"192.0.1.1", false},
        {"192.0.2.10", true}, // TEST-NET-1
        {"192.0.3.1", false},
        {"198.18.0.1", true}, // benchmarking 198.18.0.0/15
        {"198.19.255.255", true},
        {"198.17.255.255", false},
        {"198.20.0.1", false},
        {"198.51.100.7", true}, // TEST-NET-2
        {"198.51.101.7", false},
        {"203.0.113.9", true}, // TEST-NET-3
        {"203.0.114.9", false},
        {"192.31.196.1", false}, // AS112-v4 is globally reachable
        // IPv6 registry and SIIT.
        {"::ffff:0:7f00:1", true}, // SIIT IPv4-translated 127.0.0.1
        {"::ffff:0:808:808", true},
        {"::ffff:0:0:0", true},
        {"::fffe:0:808:808", false},
        {"::ffff:198.18.0.1", true}, // mapped benchmarking address
        {"64:ff9b::192.0.0.170", true},
        {"100::1", true},       // discard-only 100::/64
        {"100:0:0:1::1", true}, // dummy prefix
        {"100:0:0:2::1", false},
        {"2001:2::1", true},   // benchmarking 2001:2::/48
        {"2001:db8::1", true}, // documentation
        {"3fff::1", true},     // documentation 3fff::/20
        {"3fff:1000::1", false},
        {"5f00::1", true},     // SRv6 SIDs
        {"2001:10::1", true},  // ORCHID (deprecated)
        {"2001:1ff::1", true}, // rest of 2001::/23
        {"2001:1::1", false},  // PCP anycast, globally reachable
        {"2001:1::3", false},
        {"2001:1::4", true},
        {"2001:3::1", false},     // AMT
        {"2001:4:112::1", false}, // AS112-v6
        {"2001:4:113::1", true},
        {"2001:20::1", false},  // ORCHIDv2
        {"2001:30::1", false},  // DRIP
        {"2001:200::1", false}, // first block outside 2001::/23 (WIDE)
    };
    for (const auto& r : rows) {
        EXPECT_EQ(is_private_destination(ip(r.addr)), r.priv) << r.addr;
    }
}

TEST(normalize_host, forms) {
    struct row {
        const char* in;
        const char* out;
    };
    const row rows[] = {
        {"Example.COM", "example.com"},
        {"example.com.", "example.com"},
        {"[::1]", "::1"},
        {"[2001:DB8:0::1]", "2001:db8::1"},
        {"[::ffff:7f00:1]", "127.0.0.1"},
        {"0x7f000001", "127.0.0.1"},
        {"2130706433", "127.0.0.1"},
        {"0177.0.0.1", "127.0.0.1"},
        {"127.1", "127.0.0.1"},
        {"127.0.0.1.", "127.0.0.1"},
        {"0X7F.1", "127.0.0.1"},
        {"1e100.net", "1e100.net"},
        {"cafe.de", "cafe.de"},
        {"0xcafe.de", "0xcafe.de"},
        {"127.0.0.1 evil.com", "127.0.0.1 evil.com"}, // never truncated to the IPv4 part
        {"", ""},
        {"[", "["},
        {"[]", "[]"},
        {"[[::1]]", "[[::1]]"},
        {"[::1].", "::1"},
        {"a..", "a.."},
        {".", ""},
        {"[127.0.0.1]", "[127.0.0.1]"},
    };
    for (const auto& r : rows) {
        EXPECT_EQ(normalize_host(r.in), r.out) << r.in;
    }
}

// UTS #46 non-transitional ToASCII (expected A-labels from the UTS #46 conformance data
// and RFC 3492 examples, not from the code under test).
TEST(normalize_host, idna_to_punycode) {
    struct row {
        const char* in;
        const char* out;
    };
    const row rows[] = {
        {"b\u00fccher.example", "xn--bcher-kva.example"},
        {"B\u00dcCHER.Example", "xn--bcher-kva.example"},      // upper case folds
        {"b\u00fccher.example.", "xn--bcher-kva.example"},     // trailing dot
        {"b\u00fccher\uff0eexample", "xn--bcher-kva.example"}, // full-width dot
        {"b\u00fccher\u3002example", "xn--bcher-kva.example"}, // ideographic dot
        {"\uff42\u00fc\uff43\uff48\uff45\uff52.example", "xn--bcher-kva.example"}, // full-width
        {"\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25\u3002\uff43\uff4f\uff4d", "example.com"},
        {"fa\u00df.de", "xn--fa-hia.de"}, // non-transitional: ß kept
        {"\u4f8b\u3048.\u30c6\u30b9\u30c8", "xn--r8jz45g.xn--zckzah"},
        {"\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444", "xn--e1afmkfd.xn--p1ai"},
        // Full-width IPv4 spellings map to ASCII and are then normalised as addresses.
        {"\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11", "127.0.0.1"},
        {"\uff10\uff58\uff17\uff46\uff10\uff10\uff10\uff10\uff10\uff11", "127.0.0.1"},
        {"\uff11\uff12\uff17\u3002\uff11", "127.0.0.1"},
    };
    for (const auto& r : rows) {
        EXPECT_EQ(normalize_host(r.in), r.out) << r.in;
        EXPECT_EQ(normalize_host(normalize_host(r.in)), r.out) << r.in; // idempotent
    }
}

TEST(normalize_host, invalid_idn_is_empty) {
    const char* const bad[] = {
        "b\u00fccher..example",  // empty label
        "\u00fc\xff.example",    // ill-formed UTF-8
        "\xc3",                  // truncated UTF-8 sequence
        "b\u00fccher_x.example", // '_' disallowed by STD3 inside an IDN
        "\u00fc:80",             // ':' is not part of a name
        "[\u00fc]",              // brackets around a non-address
        "\u00fc\u2028.example",  // line separator: disallowed
        "\u00fc\ufffd.example",  // replacement character: disallowed
        "a\u05d0.example",       // bidi: Latin then Hebrew in one label (CheckBidi)
        "\u06271a.example",      // bidi: RTL label containing a Latin letter
        "\u00fc\u200d.example",  // ZWJ not after a virama (CheckJoiners)
        "-\u00fc.example",       // leading hyphen
        "\u00fc-.example",       // trailing hyphen
        "\u0300\u00fc.example",  // label starts with a combining mark
    };
    for (const char* in : bad) {
        EXPECT_EQ(normalize_host(in), "") << in;
    }
    // An embedded NUL (not expressible in the literals above) is disallowed too.
    using namespace std::string_view_literals;
    EXPECT_EQ(normalize_host("\u00fc\0.example"sv), "");
    // A non-ASCII label that makes the name longer than DNS allows.
    std::string long_name;
    for (int i = 0; i < 30; ++i) {
        long_name += "\u00fc\u00fc\u00fc\u00fc.";
    }
    long_name += "example";
    EXPECT_EQ(normalize_host(long_name), "");
    // A single over-long label (more than 63 octets once encoded).
    std::string long_label = "\u00fc";
    for (int i = 0; i < 70; ++i) {
        long_label += "a";
    }
    EXPECT_EQ(normalize_host(long_label + ".example"), "");
}

TEST(host_matches, patterns) {
    EXPECT_TRUE(host_matches("*", "anything.example"));
    EXPECT_TRUE(host_matches("*", "10.0.0.1"));
    EXPECT_FALSE(host_matches("*", ""));
    EXPECT_TRUE(host_matches("api.openai.com", "api.openai.com"));
    EXPECT_TRUE(host_matches("api.openai.com", "API.OpenAI.com"));
    EXPECT_FALSE(host_matches("api.openai.com", "api.openai.com.evil"));
    EXPECT_FALSE(host_matches("api.openai.com", "xapi.openai.com"));
    EXPECT_TRUE(host_matches("*.anthropic.com", "api.anthropic.com"));
    EXPECT_TRUE(host_matches("*.anthropic.com", "a.b.anthropic.com"));
    EXPECT_FALSE(host_matches("*.anthropic.com", "anthropic.com"));
    EXPECT_FALSE(host_matches("*.anthropic.com", "evilanthropic.com"));
    EXPECT_FALSE(host_matches("*.anthropic.com", ".anthropic.com"));
    EXPECT_FALSE(host_matches("*.", "a."));
    EXPECT_FALSE(host_matches("", "a"));
    EXPECT_TRUE(host_matches("::1", "::1"));
}

TEST(match_rule, first_match_and_no_match) {
    policy p;
    policy_rule deny_delete;
    deny_delete.hosts = {"api.example.com"};
    deny_delete.methods = {"DELETE"};
    deny_delete.act = action::deny;
    policy_rule post_v1;
    post_v1.hosts = {"api.example.com"};
    post_v1.ports = {443};
    post_v1.methods = {"POST"};
    post_v1.path_prefix = "/v1/";
    post_v1.act = action::allow;
    policy_rule opaque;
    opaque.hosts = {"*.tunnel.example"};
    opaque.act = action::allow;
    opaque.inspect = false;
    policy_rule supervise_all;
    supervise_all.hosts = {"*"};
    supervise_all.ports = {443};
    supervise_all.act = action::supervise;
    p.rules = {deny_delete, post_v1, opaque, supervise_all};

    EXPECT_EQ(match_rule(p, "api.example.com", 443, "DELETE", "/v1/x"), &p.rules[0]);
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "POST", "/v1/chat"), &p.rules[1]);
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "post", "/v1/chat"), &p.rules[1]);
    // Path and port constraints fall through to later rules.
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "POST", "/v2/chat"), &p.rules[3]);
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "POST", "/v1"), &p.rules[3]);
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "GET", "/v1/chat"), &p.rules[3]);
    EXPECT_EQ(match_rule(p, "x.tunnel.example", 22, "", ""), &p.rules[2]);
    // No rule: deny (nullptr).
    EXPECT_EQ(match_rule(p, "api.example.com", 8443, "POST", "/v1/chat"), nullptr);
    EXPECT_EQ(match_rule(p, "other.example", 80, "GET", "/"), nullptr);
    // A method-constrained rule never matches an unknown (empty) method in request phase.
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "", "/v1/chat"), &p.rules[3]);
    policy empty;
    EXPECT_EQ(match_rule(empty, "a.com", 443, "GET", "/"), nullptr);
}

TEST(match_rule, connect_phase_uses_host_and_port_only) {
    policy p;
    policy_rule deny_delete;
    deny_delete.hosts = {"api.example.com"};
    deny_delete.methods = {"DELETE"};
    deny_delete.act = action::deny;
    policy_rule post_v1;
    post_v1.hosts = {"api.example.com"};
    post_v1.ports = {443};
    post_v1.methods = {"POST"};
    post_v1.path_prefix = "/v1/";
    policy_rule deny_all;
    deny_all.act = action::deny;
    p.rules = {deny_delete, post_v1, deny_all};
    // The narrow deny is skipped for the CONNECT; the constrained allow decides the tunnel.
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "", "", true), &p.rules[1]);
    EXPECT_EQ(match_rule(p, "api.example.com", 80, "", "", true), &p.rules[2]);
    EXPECT_EQ(match_rule(p, "other.example", 443, "", "", true), &p.rules[2]);
    // Then each inner request is decided in full.
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "DELETE", "/v1/x"), &p.rules[0]);
    EXPECT_EQ(match_rule(p, "api.example.com", 443, "GET", "/v1/x"), &p.rules[2]);

    policy only_narrow_deny;
    only_narrow_deny.rules = {deny_delete};
    EXPECT_EQ(match_rule(only_narrow_deny, "api.example.com", 443, "", "", true), nullptr);
}

TEST(refusing_hosts_before, every_deny_or_supervise_rule_before_the_chosen_one_on_its_port) {
    policy p;
    policy_rule deny_post; // constrained, any port
    deny_post.hosts = {"api.example.com"};
    deny_post.methods = {"POST"};
    deny_post.act = action::deny;
    policy_rule deny_admin; // plain, port 443 only
    deny_admin.hosts = {"admin.example.com", "*.corp.example"};
    deny_admin.ports = {443};
    deny_admin.act = action::deny;
    policy_rule allow_docs;
    allow_docs.hosts = {"docs.example.com"};
    policy_rule watch_any; // no hosts: every host
    watch_any.path_prefix = "/upload";
    watch_any.act = action::supervise;
    policy_rule opaque;
    opaque.inspect = false;
    policy_rule after;
    after.hosts = {"late.example.com"};
    after.act = action::deny;
    p.rules = {deny_post, deny_admin, allow_docs, watch_any, opaque, after};
    using v = std::vector<std::string>;
    EXPECT_EQ(refusing_hosts_before(p, p.rules[4], 443),
              (v{"api.example.com", "admin.example.com", "*.corp.example", "*"}));
    EXPECT_EQ(refusing_hosts_before(p, p.rules[4], 8443), (v{"api.example.com", "*"}));
    EXPECT_EQ(refusing_hosts_before(p, p.rules[2], 8443), (v{"api.example.com"}));
    EXPECT_EQ(refusing_hosts_before(p, p.rules[0], 443), v{});
}

TEST(resolve_identity, none_ambiguous_and_listener_fixed) {
    std::vector<identity> ids(3);
    ids[0].name = "patcher";
    ids[0].source_cidrs = {net("10.1.0.0/16")};
    ids[1].name = "fuzzer";
    ids[1].source_cidrs = {net("10.2.0.0/16"), net("fd00:2::/32")};
    ids[2].name = "overlap";
    ids[2].source_cidrs = {net("10.2.5.0/24")};

    EXPECT_EQ(resolve_identity(ids, std::nullopt, ip("10.1.3.4")), "patcher");
    EXPECT_EQ(resolve_identity(ids, std::nullopt, ip("fd00:2::9")), "fuzzer");
    EXPECT_EQ(resolve_identity(ids, std::nullopt, ip("10.2.1.1")), "fuzzer");
    EXPECT_EQ(resolve_identity(ids, std::nullopt, ip("10.2.5.9")), std::nullopt);  // ambiguous
    EXPECT_EQ(resolve_identity(ids, std::nullopt, ip("192.0.2.1")), std::nullopt); // none
    // A listener-bound identity wins whatever the source.
    EXPECT_EQ(resolve_identity(ids, std::optional<std::string>("patcher"), ip("10.2.5.9")),
              "patcher");
    EXPECT_EQ(resolve_identity({}, std::optional<std::string>("sidecar"), ip("192.0.2.1")),
              "sidecar");
}

TEST(policy_for, exact_then_wildcard) {
    std::vector<policy> ps(3);
    ps[0].identity = "*";
    ps[1].identity = "patcher";
    ps[2].identity = "fuzzer";
    EXPECT_EQ(policy_for(ps, "patcher"), &ps[1]);
    EXPECT_EQ(policy_for(ps, "fuzzer"), &ps[2]);
    EXPECT_EQ(policy_for(ps, "other"), &ps[0]);
    std::vector<policy> none(1);
    none[0].identity = "patcher";
    EXPECT_EQ(policy_for(none, "other"), nullptr);
}
