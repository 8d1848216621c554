// The admin commands (cli_admin.hpp): options and token in admin_options.cpp, replica
// discovery in admin_replicas.cpp, the HTTP client in admin_client.cpp, tables in
// cli_table.cpp; this file holds the commands themselves.
#include "cli_admin.hpp"

#include "admin_client.hpp"
#include "admin_options.hpp"
#include "admin_replicas.hpp"
#include "cli_table.hpp"

#include <boost/beast/http/verb.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <expected>
#include <iostream>
#include <map>
#include <optional>
#include <pwd.h>
#include <set>
#include <string>
#include <string_view>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace sluice::cli {

namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

constexpr const char* usage_text =
    R"(usage: sluice approvals list [options]
       sluice approvals approve ID [--reason R] [--by B] [options]
       sluice approvals deny ID [--reason R] [--by B] [options]
       sluice flows [options]
       sluice kill IDENTITY|--all [options]
       sluice revive IDENTITY|--all [options]

options:
  --admin URL        admin API of a sluice replica (default $SLUICE_ADMIN_URL, else
                     http://127.0.0.1:9901); repeat it or separate URLs with commas; a host
                     name resolving to several addresses (a Kubernetes headless Service)
                     means every address, on the same port
  --token-file FILE  bearer token file (default $SLUICE_ADMIN_TOKEN, else admin.token in
                     the data dir)
  --data-dir DIR     the data dir `sluice run --data-dir DIR` uses (default
                     $XDG_DATA_HOME/sluice or ~/.local/share/sluice; --dir is an alias)
  --json             print JSON instead of tables
  --timeout D        per-replica deadline, e.g. 500ms, 10s (default 10s)
  --by B             who decides (approve/deny; default USER@HOST)
  --reason R         why (approve/deny; recorded with the decision)

exit codes: 0 success, 2 usage or input error, 3 runtime failure (a replica unreachable,
token refused, API error; kill and revive: unless a replica that answered shares a control
store, which carries the change to every replica)
)";

int usage_error(std::string_view cmd, std::string_view message) {
    std::cerr << "sluice " << cmd << ": " << message << "\n" << usage_text;
    return 2;
}

// ------------------------------------------------------------------ shared setup

struct session {
    options opts;
    std::vector<replica> replicas;
    std::string token;
};

// Parses options, finds the token and the replicas. Returns the exit code on failure.
std::expected<session, int> open_session(std::string_view cmd, int argc, char** argv, int first,
                                         std::set<std::string_view> extra) {
    std::set<std::string_view> allowed{"--admin", "--token-file", "--data-dir",
                                       "--dir",   "--json",       "--timeout"};
    allowed.insert(extra.begin(), extra.end());
    for (int i = first; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--")
            break;
        if (a == "-h" || a == "--help") {
            std::cout << usage_text;
            return std::unexpected(0);
        }
    }
    auto o = parse_options(argc, argv, first, std::move(allowed));
    if (!o)
        return std::unexpected(usage_error(cmd, o.error()));
    session s;
    s.opts = std::move(*o);
    auto replicas = find_replicas(s.opts);
    if (!replicas) {
        std::cerr << "sluice " << cmd << ": " << replicas.error() << "\n";
        return std::unexpected(2);
    }
    s.replicas = std::move(*replicas);
    auto token = find_token(s.opts);
    if (!token) {
        std::cerr << "sluice " << cmd << ": " << token.error() << "\n";
        return std::unexpected(2);
    }
    s.token = std::move(*token);
    return s;
}

std::string default_by() {
    std::string user;
    if (const auto* pw = ::getpwuid(::getuid()); pw && pw->pw_name)
        user = pw->pw_name;
    else if (const char* u = std::getenv("USER"))
        user = u;
    else
        user = "uid" + std::to_string(::getuid());
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0 && host[0])
        return user + "@" + host;
    return user;
}

// Appends the objects of the array `key` of one replica's answer to `merged`, each with
// its "replica" label; false when the answer has no such array. An entry that already
// names its replica (an approval another replica of a fleet holds, listed through the
// control store) keeps that name: it says where the request is held.
bool append_listed(const json::object& body, std::string_view key, const std::string& label,
                   json::array& merged) {
    const auto* list = body.if_contains(key);
    if (!list || !list->is_array())
        return false;
    for (const auto& v : list->as_array()) {
        if (!v.is_object())
            continue;
        json::object e = v.as_object();
        if (!e.contains("replica"))
            e["replica"] = label;
        merged.push_back(std::move(e));
    }
    return true;
}

// A fleet's replicas each list every held request: one row per id, the holder's own
// (listed with the asked replica's label) where it answered.
void one_per_id(json::array& merged, const std::vector<std::string>& labels) {
    json::array out;
    std::unordered_map<std::string, std::size_t> at;
    for (auto& v : merged) {
        const auto id = str(v.as_object(), "id");
        auto [it, fresh] = at.emplace(id, out.size());
        if (fresh) {
            out.push_back(std::move(v));
            continue;
        }
        const auto holder = str(v.as_object(), "replica");
        if (std::find(labels.begin(), labels.end(), holder) != labels.end())
            out[it->second] = std::move(v);
    }
    merged = std::move(out);
}

// ------------------------------------------------------------------ approvals

// One row per approval, its findings as notes under it.
void print_approvals(const json::array& merged, bool multi) {
    table t;
    if (multi)
        t.header.push_back("REPLICA");
    for (const char* h :
         {"ID", "IDENTITY", "SOURCE", "AGE", "EXPIRES", "REASON", "FINDINGS", "REQUEST"})
        t.header.push_back(h);
    t.flex = t.header.size() - 1;
    t.right.assign(t.header.size(), false);
    t.right[t.header.size() - 5] = t.right[t.header.size() - 4] = true;
    t.right[t.header.size() - 2] = true;
    for (const auto& v : merged) {
        const auto& a = v.as_object();
        std::vector<std::string> row;
        if (multi)
            row.push_back(str(a, "replica"));
        std::vector<std::string> notes;
        std::size_t nfind = 0;
        if (const auto* f = a.if_contains("findings"); f && f->is_array()) {
            for (const auto& fv : f->as_array()) {
                if (!fv.is_object())
                    continue;
                const auto& fo = fv.as_object();
                ++nfind;
                std::string n = "finding " + str(fo, "rule") + " in " + str(fo, "location");
                if (auto var = str(fo, "variant"); !var.empty())
                    n += " via " + var;
                if (auto off = str(fo, "offset"); !off.empty())
                    n += " at " + off;
                n += "  " + str(fo, "fingerprint");
                notes.push_back(std::move(n));
            }
        }
        for (const auto& x :
             {str(a, "id"), str(a, "identity"), str(a, "source"), human_ms(num(a, "age_ms")),
              human_ms(num(a, "expires_in_ms")), str(a, "reason"), std::to_string(nfind),
              str(a, "method") + " " + str(a, "url")})
            row.push_back(x);
        t.add(std::move(row), std::move(notes));
    }
    t.print(std::cout);
}

int approvals_list(session& s) {
    auto outs =
        call_all(s.replicas, call{http::verb::get, "/v1/approvals", {}}, s.token, s.opts.timeout);
    bool failed = false;
    json::array merged, statuses;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        statuses.push_back(replica_status(s.replicas[i], outs[i]));
        if (!ok(outs[i])) {
            failed = true;
            continue;
        }
        if (!append_listed(outs[i].body.as_object(), "approvals", s.replicas[i].label, merged)) {
            failed = true;
            outs[i].error = "answer without an \"approvals\" array";
            statuses.back().as_object()["ok"] = false;
            statuses.back().as_object()["error"] = outs[i].error;
            continue;
        }
    }
    std::vector<std::string> labels;
    for (const auto& r : s.replicas)
        labels.push_back(r.label);
    one_per_id(merged, labels);
    // Nearest expiry first: that is the one a person must look at now.
    std::stable_sort(merged.begin(), merged.end(), [](const json::value& a, const json::value& b) {
        return num(a.as_object(), "expires_in_ms") < num(b.as_object(), "expires_in_ms");
    });
    if (s.opts.json) {
        print_json(json::object{{"approvals", merged}, {"replicas", statuses}});
    } else if (merged.empty()) {
        std::cout << "no pending approvals\n";
    } else {
        print_approvals(merged, s.replicas.size() > 1);
    }
    for (std::size_t i = 0; i < outs.size(); ++i)
        if (!ok(outs[i]))
            report_failure("approvals list", s.replicas[i], outs[i]);
    return failed ? 3 : 0;
}

int approvals_decide(session& s, std::string_view verb, const std::string& id) {
    std::string cmd = "approvals " + std::string(verb);
    // The id travels as one path segment: anything else would be a different route.
    if (id.empty() || id.size() > 200 || !std::all_of(id.begin(), id.end(), [](unsigned char c) {
            return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ':';
        }))
        return usage_error(cmd, "'" + printable(id) +
                                    "' is not an approval id (see `sluice approvals list`)");
    json::object body{{"by", s.opts.by ? *s.opts.by : default_by()}};
    if (s.opts.reason)
        body["reason"] = *s.opts.reason;
    auto outs = call_all(s.replicas,
                         call{http::verb::post, "/v1/approvals/" + id + "/" + std::string(verb),
                              json::serialize(body)},
                         s.token, s.opts.timeout);
    // The approval lives on one replica; the others answer 404 unknown_approval.
    std::optional<std::size_t> decided;
    bool runtime_failure = false;
    json::array statuses;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        statuses.push_back(replica_status(s.replicas[i], outs[i]));
        if (ok(outs[i]))
            decided = decided ? decided : i;
        else if (!(outs[i].status == 404 && api_reason(outs[i]) == "unknown_approval"))
            runtime_failure = true;
    }
    if (s.opts.json) {
        json::object o;
        if (decided) {
            o = outs[*decided].body.as_object();
            o["replica"] = s.replicas[*decided].label;
        }
        o["replicas"] = statuses;
        print_json(o);
    } else if (decided) {
        const auto& b = outs[*decided].body.as_object();
        std::cout << printable(str(b, "decision").empty() ? std::string(verb) : str(b, "decision"))
                  << " " << printable(id) << " by " << printable(str(b, "by"))
                  << (s.replicas.size() > 1 ? " on " + s.replicas[*decided].label : "") << "\n";
    }
    for (std::size_t i = 0; i < outs.size(); ++i)
        if (!ok(outs[i]) && !(outs[i].status == 404 && api_reason(outs[i]) == "unknown_approval"))
            report_failure(cmd, s.replicas[i], outs[i]);
    if (decided)
        return runtime_failure ? 3 : 0;
    if (runtime_failure) {
        std::cerr << "sluice " << cmd << ": " << printable(id)
                  << " was not decided: a replica could not be asked\n";
        return 3;
    }
    std::cerr << "sluice " << cmd << ": no pending approval " << printable(id)
              << " (already decided, timed out or withdrawn; see `sluice approvals list`)\n";
    return 2;
}

// ------------------------------------------------------------------ kill / revive

int switch_command(std::string_view cmd, int argc, char** argv) {
    auto s = open_session(cmd, argc, argv, 1, {"--all"});
    if (!s)
        return s.error();
    if (s->opts.all == !s->opts.positional.empty() || s->opts.positional.size() > 1)
        return usage_error(cmd, "give one IDENTITY or --all");
    json::object body;
    std::string what;
    if (s->opts.all) {
        body["all"] = true;
        what = "all";
    } else {
        body["identity"] = s->opts.positional.front();
        what = s->opts.positional.front();
        if (what.empty())
            return usage_error(cmd, "empty identity");
    }
    auto outs = call_all(s->replicas,
                         call{http::verb::post, "/v1/" + std::string(cmd), json::serialize(body)},
                         s->token, s->opts.timeout);
    std::size_t failures = 0;
    std::int64_t closed = 0;
    // A replica sharing a control store answered "store": "shared": every replica of the
    // fleet applies the change through the store, whether or not this command reached it.
    bool shared = false;
    json::array statuses;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        auto e = replica_status(s->replicas[i], outs[i]);
        if (ok(outs[i])) {
            const auto& b = outs[i].body.as_object();
            if (const auto* st = b.if_contains("store"); st && st->is_string()) {
                e["store"] = *st;
                shared = shared || st->as_string() == "shared";
            }
            if (auto c = num(b, "closed"); c >= 0) {
                e["closed"] = c;
                closed += c;
            }
            if (const auto* p = b.if_contains("persisted"); p && p->is_bool())
                e["persisted"] = p->as_bool();
        } else {
            ++failures;
        }
        statuses.push_back(std::move(e));
    }
    bool is_kill = cmd == "kill";
    if (s->opts.json) {
        json::object o{{is_kill ? "killed" : "revived", what}, {"replicas", statuses}};
        if (is_kill)
            o["closed"] = closed;
        if (shared)
            o["store"] = "shared";
        print_json(o);
    } else {
        table t;
        t.header = {"REPLICA", "RESULT"};
        t.flex = 1;
        for (std::size_t i = 0; i < outs.size(); ++i) {
            std::string result;
            if (ok(outs[i])) {
                result = (is_kill ? "killed " : "revived ") + what;
                if (auto c = num(outs[i].body.as_object(), "closed"); is_kill && c >= 0)
                    result += ", " + std::to_string(c) + (c == 1 ? " flow" : " flows") + " closed";
                // The kill switch state is kept in the data dir so a restart keeps it; say
                // so when that write failed.
                if (const auto* p = outs[i].body.as_object().if_contains("persisted");
                    p && p->is_bool() && !p->as_bool())
                    result += " (NOT saved in the data dir: a restart would undo it)";
                if (str(outs[i].body.as_object(), "store") == "pending")
                    result += " (control store unreachable: in force on this replica only "
                              "until the store is back, then on every replica)";
            } else {
                result = "FAILED: " + outs[i].error;
                if (shared)
                    result += " (applied there through the control store all the same)";
            }
            t.add({s->replicas[i].label, result});
        }
        t.print(std::cout);
    }
    if (failures) {
        std::cerr << "sluice " << cmd << ": " << failures << " of " << outs.size()
                  << " replica(s) failed";
        for (std::size_t i = 0; i < outs.size(); ++i)
            if (!ok(outs[i]))
                std::cerr << "; " << s->replicas[i].label << ": " << outs[i].error;
        std::cerr << "\n";
        if (!shared)
            return 3;
        // The change is in the store, so the whole fleet has it: the command did what it
        // was asked; the replicas it could not ask are worth a look (a token, a network).
        std::cerr << "sluice " << cmd << ": " << (is_kill ? "the kill" : "the revive")
                  << " is in the control store: every replica sharing it applies it\n";
    }
    return 0;
}

// ------------------------------------------------------------------ flows

struct flows_answer {
    bool failed = false;
    json::array merged, statuses;
    std::size_t answered = 0; ///< replicas whose flows were read
    /// Kill switch state per replica: label, "" (off) or what is killed.
    std::vector<std::pair<std::string, std::string>> killed_text;
};

// What the kill switch of one replica's answer covers: "" (off), "all identities" or the
// identities' names.
std::string killed_of(const json::object& b, json::object& status) {
    std::string k;
    if (const auto* kv = b.if_contains("killed"); kv && kv->is_object()) {
        status["killed"] = *kv;
        const auto& ko = kv->as_object();
        if (const auto* all = ko.if_contains("all"); all && all->is_bool() && all->as_bool())
            k = "all identities";
        else if (const auto* ids = ko.if_contains("identities"); ids && ids->is_array())
            for (const auto& id : ids->as_array())
                if (id.is_string())
                    k += (k.empty() ? "" : ", ") + std::string(id.as_string());
    }
    return k;
}

// Every replica's flows, sorted by identity, then oldest first.
flows_answer collect_flows(const session& s, std::vector<outcome>& outs) {
    flows_answer fl;
    for (std::size_t i = 0; i < outs.size(); ++i) {
        auto e = replica_status(s.replicas[i], outs[i]);
        if (!ok(outs[i])) {
            fl.failed = true;
            fl.statuses.push_back(std::move(e));
            continue;
        }
        const auto& b = outs[i].body.as_object();
        if (!append_listed(b, "flows", s.replicas[i].label, fl.merged)) {
            fl.failed = true;
            outs[i].error = "answer without a \"flows\" array";
            e["ok"] = false;
            e["error"] = outs[i].error;
            fl.statuses.push_back(std::move(e));
            continue;
        }
        fl.killed_text.emplace_back(s.replicas[i].label, killed_of(b, e));
        fl.statuses.push_back(std::move(e));
        ++fl.answered;
    }
    std::stable_sort(fl.merged.begin(), fl.merged.end(),
                     [](const json::value& a, const json::value& b) {
                         const auto &x = a.as_object(), &y = b.as_object();
                         auto ix = str(x, "identity"), iy = str(y, "identity");
                         if (ix != iy)
                             return ix < iy;
                         return num(x, "age_ms") > num(y, "age_ms");
                     });
    return fl;
}

void print_flow_table(const json::array& merged, bool multi) {
    table t;
    if (multi)
        t.header.push_back("REPLICA");
    for (const char* h : {"IDENTITY", "KIND", "FLOW", "SOURCE", "AGE", "UP", "DOWN", "DESTINATION"})
        t.header.push_back(h);
    t.flex = t.header.size() - 1;
    t.right.assign(t.header.size(), false);
    for (std::size_t c = t.header.size() - 4; c < t.header.size() - 1; ++c)
        t.right[c] = true;
    std::map<std::string, std::size_t> per_identity;
    for (const auto& v : merged) {
        const auto& f = v.as_object();
        std::vector<std::string> row;
        if (multi)
            row.push_back(str(f, "replica"));
        for (const auto& x : {str(f, "identity"), str(f, "kind"), str(f, "flow"), str(f, "source"),
                              human_ms(num(f, "age_ms")), human_bytes(num(f, "bytes_up")),
                              human_bytes(num(f, "bytes_down")), str(f, "destination")})
            row.push_back(x);
        ++per_identity[str(f, "identity")];
        t.add(std::move(row));
    }
    t.print(std::cout);
    std::cout << merged.size() << (merged.size() == 1 ? " flow" : " flows") << ", "
              << per_identity.size() << (per_identity.size() == 1 ? " identity" : " identities")
              << "\n";
}

void print_flows(const flows_answer& fl, std::size_t replicas) {
    if (fl.merged.empty()) {
        // Said only of replicas that answered: nothing is known of the others.
        if (fl.answered == replicas)
            std::cout << "no live flows\n";
        else if (fl.answered > 0)
            std::cout << "no live flows on the replicas that answered\n";
    } else {
        print_flow_table(fl.merged, replicas > 1);
    }
    // The kill switch state: once when every replica agrees, else per replica.
    const auto& kt = fl.killed_text;
    bool same = std::all_of(kt.begin(), kt.end(),
                            [&](const auto& k) { return k.second == kt.front().second; });
    if (!kt.empty() && same) {
        const auto& k = kt.front().second;
        std::cout << "kill switch: " << (k.empty() ? "off" : "on for " + printable(k)) << "\n";
    } else {
        for (const auto& [label, k] : kt)
            std::cout << "kill switch on " << label << ": "
                      << (k.empty() ? "off" : "on for " + printable(k)) << "\n";
    }
}

} // namespace

int cmd_approvals(int argc, char** argv) {
    std::string_view sub = argc >= 2 ? std::string_view(argv[1]) : std::string_view();
    if (sub == "-h" || sub == "--help") {
        std::cout << usage_text;
        return 0;
    }
    if (sub == "list") {
        auto s = open_session("approvals list", argc, argv, 2, {});
        if (!s)
            return s.error();
        if (!s->opts.positional.empty())
            return usage_error("approvals list", "unexpected argument '" +
                                                     printable(s->opts.positional.front()) + "'");
        return approvals_list(*s);
    }
    if (sub == "approve" || sub == "deny") {
        std::string cmd = "approvals " + std::string(sub);
        auto s = open_session(cmd, argc, argv, 2, {"--reason", "--by"});
        if (!s)
            return s.error();
        if (s->opts.positional.size() != 1)
            return usage_error(cmd, "give exactly one approval ID");
        return approvals_decide(*s, sub, s->opts.positional.front());
    }
    return usage_error("approvals", sub.empty() ? "missing list, approve or deny"
                                                : "unknown subcommand '" + printable(sub) + "'");
}

int cmd_flows(int argc, char** argv) {
    auto s = open_session("flows", argc, argv, 1, {});
    if (!s)
        return s.error();
    if (!s->opts.positional.empty())
        return usage_error("flows",
                           "unexpected argument '" + printable(s->opts.positional.front()) + "'");
    auto outs =
        call_all(s->replicas, call{http::verb::get, "/v1/flows", {}}, s->token, s->opts.timeout);
    auto fl = collect_flows(*s, outs);
    if (s->opts.json) {
        print_json(json::object{{"flows", fl.merged}, {"replicas", fl.statuses}});
    } else {
        print_flows(fl, s->replicas.size());
    }
    for (std::size_t i = 0; i < outs.size(); ++i)
        if (!ok(outs[i]))
            report_failure("flows", s->replicas[i], outs[i]);
    return fl.failed ? 3 : 0;
}

int cmd_kill(int argc, char** argv) {
    return switch_command("kill", argc, argv);
}

int cmd_revive(int argc, char** argv) {
    return switch_command("revive", argc, argv);
}

} // namespace sluice::cli
