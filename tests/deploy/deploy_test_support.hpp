// Helpers shared by the deploy/ checks (manifests_test.cpp, gateway_fleet_test.cpp,
// image_and_unit_test.cpp): where the tree is, running a command, the Kubernetes objects
// under deploy/k8s and in an overlay, containers, mounts, label selectors, and the checks
// every workload and every sluice pod gets. Header-only (inline), for one test binary.
#pragma once

#include "sluice/config/settings.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace sluice_deploy_test {

namespace fs = std::filesystem;

inline const fs::path source_dir{SLUICE_SOURCE_DIR};
inline const fs::path deploy_dir = source_dir / "deploy";
inline const fs::path k8s_dir = deploy_dir / "k8s";
inline const std::string sluice_bin{SLUICE_BIN};

inline const std::string redis_url = "redis://:pw@redis.sluice-gateway.svc:6379/0";

// Environment the gateway config expects from its Secrets (sha256 hex of agent tokens,
// the control store's URL).
inline void set_config_environment() {
    ::setenv("SLUICE_TOKEN_SHA256_PATCHER",
             "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", 1);
    ::setenv("SLUICE_TOKEN_SHA256_REVIEWER",
             "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752", 1);
    ::setenv("SLUICE_REDIS_URL", redis_url.c_str(), 1);
    ::setenv("SLUICE_DATA_DIR", "/var/lib/sluice", 1);
}

inline std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

struct command_result {
    int status = -1; ///< exit status, or -1 if it did not exit normally
    std::string output;
};

// Runs a shell command, capturing stdout and stderr together.
inline command_result run_command(const std::string& cmd) {
    command_result r;
    FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
    if (!p)
        return r;
    std::array<char, 4096> buf{};
    std::size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0)
        r.output.append(buf.data(), n);
    int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

inline bool have_tool(const std::string& name) {
    return run_command("command -v " + name + " >/dev/null").status == 0;
}

inline std::vector<fs::path> yaml_files(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() &&
            (e.path().extension() == ".yaml" || e.path().extension() == ".yml"))
            out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

inline bool is_kustomization(const fs::path& p) {
    return p.filename() == "kustomization.yaml" || p.filename() == "kustomization.yml";
}

// Files that kustomizations (and components) name as `patches[].path`: partial objects,
// checked once applied (k8s_gateway_audit_shipping), not on their own.
inline std::set<fs::path> patch_files(const fs::path& dir) {
    std::set<fs::path> out;
    for (const auto& f : yaml_files(dir)) {
        if (!is_kustomization(f))
            continue;
        for (const auto& p : YAML::LoadFile(f.string())["patches"])
            if (p["path"])
                out.insert(fs::weakly_canonical(f.parent_path() / p["path"].as<std::string>()));
    }
    return out;
}

struct object {
    fs::path file;
    YAML::Node node;
    std::string kind() const { return node["kind"].as<std::string>(""); }
    std::string name() const { return node["metadata"]["name"].as<std::string>(""); }
    std::string where() const {
        return fs::relative(file, source_dir).string() + ": " + kind() + "/" + name();
    }
};

// Every Kubernetes object in the files under `dir` (kustomizations and patches excluded).
inline std::vector<object> objects_under(const fs::path& dir) {
    std::vector<object> out;
    const auto patches = patch_files(dir);
    for (const auto& f : yaml_files(dir)) {
        if (is_kustomization(f) || patches.count(fs::weakly_canonical(f)))
            continue;
        for (const auto& doc : YAML::LoadAllFromFile(f.string()))
            if (doc && !doc.IsNull())
                out.push_back(object{f, doc});
    }
    return out;
}

// The objects an overlay brings in: its own files and those of the kustomizations it
// names as resources (recursively), following kustomization.yaml, not the directory tree.
inline void collect_overlay(const fs::path& dir, std::vector<object>& out) {
    const YAML::Node k = YAML::LoadFile((dir / "kustomization.yaml").string());
    for (const auto& r : k["resources"]) {
        const fs::path p = dir / r.as<std::string>();
        if (fs::is_directory(p)) {
            collect_overlay(p, out);
            continue;
        }
        for (const auto& doc : YAML::LoadAllFromFile(p.string()))
            if (doc && !doc.IsNull())
                out.push_back(object{p, doc});
    }
}

inline std::vector<object> overlay(const std::string& name) {
    std::vector<object> out;
    collect_overlay(k8s_dir / "overlays" / name, out);
    return out;
}

inline const object* find(const std::vector<object>& objs, const std::string& kind,
                          const std::string& name) {
    for (const auto& o : objs)
        if (o.kind() == kind && o.name() == name)
            return &o;
    return nullptr;
}

inline const std::set<std::string> workload_kinds{"Deployment", "Job", "StatefulSet", "DaemonSet"};

inline YAML::Node pod_spec(const object& o) {
    return o.node["spec"]["template"]["spec"];
}

inline std::vector<YAML::Node> all_containers(const YAML::Node& spec) {
    std::vector<YAML::Node> out;
    for (const char* key : {"initContainers", "containers"})
        for (const auto& c : spec[key])
            out.push_back(c);
    return out;
}

inline bool is_sluice_server(const YAML::Node& c) {
    const auto args = c["args"];
    return c["image"].as<std::string>("").rfind("sluice", 0) == 0 && args && args.size() > 0 &&
           args[0].as<std::string>("") == "run";
}

inline std::string env_value(const YAML::Node& container, const std::string& name) {
    for (const auto& e : container["env"])
        if (e["name"].as<std::string>("") == name)
            return e["value"].as<std::string>("");
    return {};
}

inline bool has_env(const YAML::Node& container, const std::string& name) {
    for (const auto& e : container["env"])
        if (e["name"].as<std::string>("") == name)
            return true;
    return false;
}

// The mount path of the volume named `volume` in `container`, or "".
inline std::string mount_path(const YAML::Node& container, const std::string& volume) {
    for (const auto& m : container["volumeMounts"])
        if (m["name"].as<std::string>("") == volume)
            return m["mountPath"].as<std::string>("");
    return {};
}

inline YAML::Node volume(const YAML::Node& spec, const std::string& name) {
    for (const auto& v : spec["volumes"])
        if (v["name"].as<std::string>("") == name)
            return v;
    return YAML::Node{};
}

// Whether a label selector (matchLabels and matchExpressions, as in a NetworkPolicy peer)
// selects a pod with `labels`. An absent selector selects nothing here; `{}` selects all.
inline bool selects(const YAML::Node& selector, const YAML::Node& labels) {
    if (!selector || !selector.IsMap())
        return false;
    auto label = [&](const std::string& key) -> std::optional<std::string> {
        if (labels && labels.IsMap() && labels[key])
            return labels[key].as<std::string>("");
        return std::nullopt;
    };
    for (const auto& kv : selector["matchLabels"])
        if (label(kv.first.as<std::string>()) != kv.second.as<std::string>())
            return false;
    for (const auto& e : selector["matchExpressions"]) {
        const auto have = label(e["key"].as<std::string>(""));
        const std::string op = e["operator"].as<std::string>("");
        std::set<std::string> values;
        for (const auto& v : e["values"])
            values.insert(v.as<std::string>());
        const bool listed = have && values.count(*have);
        if ((op == "Exists" && !have) || (op == "DoesNotExist" && have) ||
            (op == "In" && !listed) || (op == "NotIn" && listed))
            return false;
    }
    return true;
}

// The sluice configurations shipped inside ConfigMaps: (where, yaml text).
inline std::vector<std::pair<std::string, std::string>>
configmap_configs(const std::vector<object>& objs) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& o : objs)
        if (o.kind() == "ConfigMap" && o.node["data"]["sluice.yaml"])
            out.emplace_back(o.where(), o.node["data"]["sluice.yaml"].as<std::string>());
    return out;
}

inline std::string port_of(const std::string& address) {
    return address.substr(address.rfind(':') + 1);
}

// The pod gives sluice a data dir it can use: a subdirectory of the `sluice-data` volume
// (sluice chmods its data dir to 0700, which only the owner may do, and a volume's root
// belongs to root), made by the `sluice-files` init container as sluice's user, which
// also copies the CA pair and the admin token there with mode 0600 under the names the
// config uses.
inline void expect_data_dir_prepared(const YAML::Node& spec, const YAML::Node& sluice,
                                     const sluice::config::settings& s) {
    const std::string volume_root = mount_path(sluice, "sluice-data");
    ASSERT_FALSE(volume_root.empty()) << "sluice mounts no sluice-data volume";
    EXPECT_EQ(s.data_dir.parent_path().string(), volume_root)
        << "data_dir must be a subdirectory of the volume, not its root";
    YAML::Node files;
    for (const auto& c : spec["initContainers"])
        if (c["name"].as<std::string>("") == "sluice-files")
            files.reset(c);
    ASSERT_TRUE(files) << "no sluice-files init container";
    EXPECT_EQ(mount_path(files, "sluice-data"), volume_root);
    EXPECT_EQ(files["securityContext"]["runAsUser"].as<int>(
                  spec["securityContext"]["runAsUser"].as<int>(-1)),
              sluice["securityContext"]["runAsUser"].as<int>(
                  spec["securityContext"]["runAsUser"].as<int>(-2)))
        << "the files must belong to sluice's user";
    std::string script;
    for (const auto& a : files["args"])
        script += a.as<std::string>() + " ";
    EXPECT_NE(script.find("install -d -m 0700 " + s.data_dir.string()), std::string::npos)
        << script;
    EXPECT_NE(script.find("install -m 0600 -t " + s.data_dir.string()), std::string::npos)
        << script;
    for (const auto& p : {s.ca_cert, s.ca_key, s.admin_token_file}) {
        EXPECT_EQ(p.parent_path(), s.data_dir);
        EXPECT_NE(script.find("/" + p.filename().string() + " "), std::string::npos)
            << p.filename() << " is not copied: " << script;
    }
}

// A workload's pod and every container in it: non-root, read-only root file system, no
// privilege escalation, capabilities dropped, seccomp, bounded resources, mounts of
// declared volumes only, and sluice's probes. Adds the containers seen to `containers`.
inline void expect_workload_hardened(const object& o, std::size_t& containers) {
    const YAML::Node spec = pod_spec(o);
    ASSERT_TRUE(spec && spec.IsMap()) << o.where() << ": no spec.template.spec";
    const YAML::Node pod_sc = spec["securityContext"];
    EXPECT_TRUE(pod_sc["runAsNonRoot"].as<bool>(false)) << o.where() << ": pod runAsNonRoot";
    EXPECT_EQ(pod_sc["seccompProfile"]["type"].as<std::string>(""), "RuntimeDefault") << o.where();
    std::set<std::string> volumes;
    for (const auto& v : spec["volumes"])
        volumes.insert(v["name"].as<std::string>());
    // Workload selectors must select their own pods.
    if (o.kind() != "Job") {
        for (const auto& kv : o.node["spec"]["selector"]["matchLabels"]) {
            EXPECT_EQ(o.node["spec"]["template"]["metadata"]["labels"][kv.first.as<std::string>()]
                          .as<std::string>(""),
                      kv.second.as<std::string>())
                << o.where() << ": the selector does not match the pod template";
        }
    }
    for (const auto& c : all_containers(spec)) {
        ++containers;
        const std::string where = o.where() + " container " + c["name"].as<std::string>("?");
        EXPECT_FALSE(c["image"].as<std::string>("").empty()) << where << ": image";
        const YAML::Node sc = c["securityContext"];
        ASSERT_TRUE(sc && sc.IsMap()) << where << ": no securityContext";
        EXPECT_TRUE(sc["runAsNonRoot"].as<bool>(false)) << where << ": runAsNonRoot";
        if (sc["runAsUser"]) {
            EXPECT_NE(sc["runAsUser"].as<int>(), 0) << where;
        }
        EXPECT_TRUE(sc["readOnlyRootFilesystem"].as<bool>(false))
            << where << ": readOnlyRootFilesystem";
        EXPECT_FALSE(sc["allowPrivilegeEscalation"].as<bool>(true))
            << where << ": allowPrivilegeEscalation must be false";
        EXPECT_FALSE(sc["privileged"].as<bool>(false)) << where;
        bool drops_all = false;
        for (const auto& cap : sc["capabilities"]["drop"])
            drops_all = drops_all || cap.as<std::string>() == "ALL";
        EXPECT_TRUE(drops_all) << where << ": capabilities.drop [ALL]";
        EXPECT_FALSE(sc["capabilities"]["add"]) << where << ": adds capabilities";
        EXPECT_EQ(sc["seccompProfile"]["type"].as<std::string>(""), "RuntimeDefault") << where;
        for (const char* part : {"requests", "limits"})
            for (const char* res : {"cpu", "memory"})
                EXPECT_TRUE(c["resources"][part][res])
                    << where << ": resources." << part << "." << res;
        for (const auto& m : c["volumeMounts"])
            EXPECT_TRUE(volumes.count(m["name"].as<std::string>()))
                << where << ": mounts undeclared volume " << m["name"].as<std::string>();
        if (is_sluice_server(c)) {
            // The kubelet's probes: /readyz gates traffic, /healthz restarts.
            const std::map<std::string, std::string> want{{"readinessProbe", "/readyz"},
                                                          {"livenessProbe", "/healthz"},
                                                          {"startupProbe", "/readyz"}};
            for (const auto& [probe, path] : want) {
                EXPECT_EQ(c[probe]["httpGet"]["path"].as<std::string>(""), path)
                    << where << ": " << probe;
                const std::string port = c[probe]["httpGet"]["port"].as<std::string>("");
                bool declared = false;
                for (const auto& p : c["ports"])
                    declared = declared || p["name"].as<std::string>("") == port ||
                               p["containerPort"].as<std::string>("") == port;
                EXPECT_TRUE(declared) << where << ": " << probe << " port " << port;
            }
        }
    }
    // Only the bootstrap Job talks to the Kubernetes API.
    if (o.name() != "sluice-bootstrap") {
        EXPECT_FALSE(spec["automountServiceAccountToken"].as<bool>(true))
            << o.where() << ": automountServiceAccountToken";
    }
}

} // namespace sluice_deploy_test
