// Static checks of what runs sluice elsewhere (deploy/): the Kubernetes manifests under
// deploy/k8s (YAML parses, each object has the fields the API needs, workloads are
// hardened, kustomizations name files that exist, the overlays fit together), the sluice
// configurations shipped in ConfigMaps and deploy/examples (loaded by sluice's own config
// loader), the Dockerfile (stages, base images, runtime packages against what the built
// binary links), and the systemd unit. Optional tools: kubectl or kustomize (overlays
// build), systemd-analyze (verify, security), dpkg and ldd (runtime packages); each test
// that needs one skips, naming it, when it is missing.
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
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path source_dir{SLUICE_SOURCE_DIR};
const fs::path deploy_dir = source_dir / "deploy";
const fs::path k8s_dir = deploy_dir / "k8s";
const std::string sluice_bin{SLUICE_BIN};

// Environment the gateway config expects from its Secret (sha256 hex of agent tokens).
void set_config_environment() {
    ::setenv("SLUICE_TOKEN_SHA256_PATCHER",
             "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", 1);
    ::setenv("SLUICE_TOKEN_SHA256_REVIEWER",
             "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752", 1);
    ::setenv("SLUICE_DATA_DIR", "/var/lib/sluice", 1);
}

std::string read_text(const fs::path& p) {
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
command_result run_command(const std::string& cmd) {
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

bool have_tool(const std::string& name) {
    return run_command("command -v " + name + " >/dev/null").status == 0;
}

std::vector<fs::path> yaml_files(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() &&
            (e.path().extension() == ".yaml" || e.path().extension() == ".yml"))
            out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

bool is_kustomization(const fs::path& p) {
    return p.filename() == "kustomization.yaml" || p.filename() == "kustomization.yml";
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

// Every Kubernetes object in the files under `dir` (kustomizations excluded).
std::vector<object> objects_under(const fs::path& dir) {
    std::vector<object> out;
    for (const auto& f : yaml_files(dir)) {
        if (is_kustomization(f))
            continue;
        for (const auto& doc : YAML::LoadAllFromFile(f.string()))
            if (doc && !doc.IsNull())
                out.push_back(object{f, doc});
    }
    return out;
}

// The objects an overlay brings in: its own files and those of the kustomizations it
// names as resources (recursively), following kustomization.yaml, not the directory tree.
void collect_overlay(const fs::path& dir, std::vector<object>& out) {
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

std::vector<object> overlay(const std::string& name) {
    std::vector<object> out;
    collect_overlay(k8s_dir / "overlays" / name, out);
    return out;
}

const object* find(const std::vector<object>& objs, const std::string& kind,
                   const std::string& name) {
    for (const auto& o : objs)
        if (o.kind() == kind && o.name() == name)
            return &o;
    return nullptr;
}

const std::set<std::string> workload_kinds{"Deployment", "Job", "StatefulSet", "DaemonSet"};

YAML::Node pod_spec(const object& o) {
    return o.node["spec"]["template"]["spec"];
}

std::vector<YAML::Node> all_containers(const YAML::Node& spec) {
    std::vector<YAML::Node> out;
    for (const char* key : {"initContainers", "containers"})
        for (const auto& c : spec[key])
            out.push_back(c);
    return out;
}

bool is_sluice_server(const YAML::Node& c) {
    const auto args = c["args"];
    return c["image"].as<std::string>("").rfind("sluice", 0) == 0 && args && args.size() > 0 &&
           args[0].as<std::string>("") == "run";
}

std::string env_value(const YAML::Node& container, const std::string& name) {
    for (const auto& e : container["env"])
        if (e["name"].as<std::string>("") == name)
            return e["value"].as<std::string>("");
    return {};
}

bool has_env(const YAML::Node& container, const std::string& name) {
    for (const auto& e : container["env"])
        if (e["name"].as<std::string>("") == name)
            return true;
    return false;
}

// The mount path of the volume named `volume` in `container`, or "".
std::string mount_path(const YAML::Node& container, const std::string& volume) {
    for (const auto& m : container["volumeMounts"])
        if (m["name"].as<std::string>("") == volume)
            return m["mountPath"].as<std::string>("");
    return {};
}

YAML::Node volume(const YAML::Node& spec, const std::string& name) {
    for (const auto& v : spec["volumes"])
        if (v["name"].as<std::string>("") == name)
            return v;
    return YAML::Node{};
}

// The sluice configurations shipped inside ConfigMaps: (where, yaml text).
std::vector<std::pair<std::string, std::string>>
configmap_configs(const std::vector<object>& objs) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& o : objs)
        if (o.kind() == "ConfigMap" && o.node["data"]["sluice.yaml"])
            out.emplace_back(o.where(), o.node["data"]["sluice.yaml"].as<std::string>());
    return out;
}

std::string port_of(const std::string& address) {
    return address.substr(address.rfind(':') + 1);
}

// The pod gives sluice a data dir it can use: a subdirectory of the `sluice-data` volume
// (sluice chmods its data dir to 0700, which only the owner may do, and a volume's root
// belongs to root), made by the `sluice-files` init container as sluice's user, which
// also copies the CA pair and the admin token there with mode 0600 under the names the
// config uses.
void expect_data_dir_prepared(const YAML::Node& spec, const YAML::Node& sluice,
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

// ------------------------------------------------------------------ Kubernetes manifests

TEST(k8s_manifests, every_file_parses_and_every_object_has_api_version_kind_and_name) {
    const auto files = yaml_files(k8s_dir);
    ASSERT_GE(files.size(), 10u) << "deploy/k8s holds the base and two overlays";
    const std::regex dns1123{"[a-z0-9]([-a-z0-9]*[a-z0-9])?"};
    std::size_t objects = 0;
    for (const auto& f : files) {
        std::vector<YAML::Node> docs;
        try {
            docs = YAML::LoadAllFromFile(f.string());
        } catch (const YAML::Exception& e) {
            ADD_FAILURE() << f << ": " << e.what();
            continue;
        }
        for (const auto& doc : docs) {
            if (!doc || doc.IsNull())
                continue;
            ASSERT_TRUE(doc.IsMap()) << f;
            const std::string api = doc["apiVersion"].as<std::string>("");
            const std::string kind = doc["kind"].as<std::string>("");
            EXPECT_FALSE(api.empty()) << f << ": no apiVersion";
            EXPECT_FALSE(kind.empty()) << f << ": no kind";
            if (is_kustomization(f)) {
                EXPECT_EQ(kind, "Kustomization") << f;
                continue;
            }
            ++objects;
            const std::string name = doc["metadata"]["name"].as<std::string>("");
            EXPECT_TRUE(std::regex_match(name, dns1123)) << f << ": metadata.name '" << name << "'";
            EXPECT_LE(name.size(), 63u) << f;
            EXPECT_FALSE(doc["metadata"]["namespace"])
                << f << ": the overlay's kustomization sets the namespace";
        }
    }
    EXPECT_GE(objects, 15u);
}

TEST(k8s_manifests, kustomization_resources_exist_and_every_manifest_is_used) {
    std::set<fs::path> used;
    for (const auto& f : yaml_files(k8s_dir)) {
        if (!is_kustomization(f))
            continue;
        const YAML::Node k = YAML::LoadFile(f.string());
        ASSERT_TRUE(k["resources"] && k["resources"].size() > 0) << f;
        for (const auto& r : k["resources"]) {
            const fs::path p = fs::weakly_canonical(f.parent_path() / r.as<std::string>());
            EXPECT_TRUE(fs::exists(p))
                << f << ": resource " << r.as<std::string>() << " is missing";
            if (fs::is_directory(p)) {
                EXPECT_TRUE(fs::exists(p / "kustomization.yaml")) << p << " is no kustomization";
            }
            used.insert(p);
        }
    }
    for (const auto& f : yaml_files(k8s_dir)) {
        if (!is_kustomization(f)) {
            EXPECT_TRUE(used.count(fs::weakly_canonical(f)))
                << f << " is not listed in any kustomization's resources";
        }
    }
    for (const char* o : {"base", "overlays/sidecar", "overlays/gateway"})
        EXPECT_TRUE(fs::exists(k8s_dir / o / "kustomization.yaml")) << o;
}

TEST(k8s_manifests, workload_containers_are_hardened_and_bounded) {
    std::size_t containers = 0;
    for (const auto& o : objects_under(k8s_dir)) {
        if (!workload_kinds.count(o.kind()))
            continue;
        const YAML::Node spec = pod_spec(o);
        ASSERT_TRUE(spec && spec.IsMap()) << o.where() << ": no spec.template.spec";
        const YAML::Node pod_sc = spec["securityContext"];
        EXPECT_TRUE(pod_sc["runAsNonRoot"].as<bool>(false)) << o.where() << ": pod runAsNonRoot";
        EXPECT_EQ(pod_sc["seccompProfile"]["type"].as<std::string>(""), "RuntimeDefault")
            << o.where();
        std::set<std::string> volumes;
        for (const auto& v : spec["volumes"])
            volumes.insert(v["name"].as<std::string>());
        // Workload selectors must select their own pods.
        if (o.kind() != "Job") {
            for (const auto& kv : o.node["spec"]["selector"]["matchLabels"]) {
                EXPECT_EQ(
                    o.node["spec"]["template"]["metadata"]["labels"][kv.first.as<std::string>()]
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
    EXPECT_GE(containers, 8u);
}

TEST(k8s_manifests, agents_never_mount_the_ca_key_or_the_audit_volume) {
    for (const auto& o : objects_under(k8s_dir)) {
        if (o.kind() != "Deployment")
            continue;
        const YAML::Node spec = pod_spec(o);
        for (const auto& c : spec["containers"]) {
            if (c["image"].as<std::string>("") != "agent")
                continue;
            for (const auto& m : c["volumeMounts"]) {
                const std::string name = m["name"].as<std::string>();
                const YAML::Node v = volume(spec, name);
                EXPECT_NE(name, "sluice-audit") << o.where();
                EXPECT_NE(name, "sluice-data") << o.where();
                if (v["secret"]) {
                    ASSERT_TRUE(v["secret"]["items"]) << o.where() << ": whole secret " << name;
                    for (const auto& item : v["secret"]["items"])
                        EXPECT_EQ(item["key"].as<std::string>(), "ca.pem") << o.where();
                }
            }
            // The agent runs as another user than sluice (10001): it cannot read sluice's files.
            EXPECT_NE(c["securityContext"]["runAsUser"].as<int>(
                          spec["securityContext"]["runAsUser"].as<int>(-1)),
                      10001)
                << o.where();
            const std::string ca = env_value(c, "SSL_CERT_FILE");
            EXPECT_EQ(ca, mount_path(c, "agent-ca") + "/ca.pem") << o.where();
            for (const char* var : {"CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                                    "GIT_SSL_CAINFO", "PIP_CERT", "NPM_CONFIG_CAFILE"})
                EXPECT_EQ(env_value(c, var), ca) << o.where() << " " << var;
            for (const char* var :
                 {"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"})
                EXPECT_TRUE(has_env(c, var)) << o.where() << " " << var;
        }
    }
}

TEST(k8s_manifests, only_the_copy_step_mounts_the_ca_key_and_admin_token) {
    std::size_t pods = 0;
    for (const auto& o : objects_under(k8s_dir)) {
        if (o.kind() != "Deployment")
            continue;
        const YAML::Node spec = pod_spec(o);
        std::set<std::string> private_volumes; // whole sluice-ca or the admin token
        for (const auto& v : spec["volumes"]) {
            if (!v["secret"])
                continue;
            const std::string secret = v["secret"]["secretName"].as<std::string>("");
            if ((secret == "sluice-ca" && !v["secret"]["items"]) || secret == "sluice-admin-token")
                private_volumes.insert(v["name"].as<std::string>());
        }
        if (private_volumes.empty())
            continue;
        ++pods;
        for (const auto& c : all_containers(spec))
            for (const auto& m : c["volumeMounts"])
                if (private_volumes.count(m["name"].as<std::string>())) {
                    EXPECT_EQ(c["name"].as<std::string>(""), "sluice-files")
                        << o.where() << ": " << m["name"].as<std::string>();
                    EXPECT_TRUE(m["readOnly"].as<bool>(false)) << o.where();
                }
    }
    EXPECT_EQ(pods, 2u) << "the sidecar's agent pod and the gateway";
}

// ------------------------------------------------------------------ overlays fit together

TEST(k8s_sidecar, agent_pod_runs_sluice_on_loopback_with_a_fixed_identity) {
    set_config_environment();
    const auto objs = overlay("sidecar");
    const object* dep = find(objs, "Deployment", "agent");
    ASSERT_NE(dep, nullptr);
    const YAML::Node spec = pod_spec(*dep);
    YAML::Node sluice, agent;
    for (const auto& c : spec["initContainers"])
        if (is_sluice_server(c))
            sluice.reset(c);
    for (const auto& c : spec["containers"])
        if (c["name"].as<std::string>("") == "agent")
            agent.reset(c);
    ASSERT_TRUE(sluice) << "sluice runs as a native sidecar (an init container)";
    EXPECT_EQ(sluice["restartPolicy"].as<std::string>(""), "Always");
    ASSERT_TRUE(agent);

    const auto configs = configmap_configs(objs);
    ASSERT_EQ(configs.size(), 1u);
    auto loaded = sluice::config::load_string(configs[0].second, configs[0].first);
    ASSERT_TRUE(loaded.has_value()) << (loaded ? "" : loaded.error().front().str());
    const auto& s = *loaded;
    ASSERT_EQ(s.listeners.size(), 1u);
    EXPECT_EQ(s.listeners[0].host, "127.0.0.1");
    EXPECT_EQ(s.listeners[0].port, 3128);
    ASSERT_TRUE(s.listeners[0].identity.has_value()) << "the listener fixes the identity";
    EXPECT_EQ(env_value(agent, "HTTPS_PROXY"), "http://127.0.0.1:3128");
    EXPECT_EQ(env_value(agent, "https_proxy"), "http://127.0.0.1:3128");

    // The config's paths are where the pod mounts things.
    expect_data_dir_prepared(spec, sluice, s);
    EXPECT_EQ(s.audit_path.parent_path().string(), mount_path(sluice, "sluice-audit"));
    EXPECT_EQ(sluice["args"][2].as<std::string>(),
              mount_path(sluice, "sluice-config") + "/sluice.yaml");
    // The probes reach the admin listener.
    std::string admin_port;
    for (const auto& p : sluice["ports"])
        if (p["name"].as<std::string>("") == "admin")
            admin_port = p["containerPort"].as<std::string>();
    EXPECT_EQ(admin_port, port_of(s.admin_address));
    EXPECT_EQ(s.admin_address.rfind("0.0.0.0:", 0), 0u) << "kubelet probes come from the node";
    EXPECT_EQ(volume(spec, "sluice-config")["configMap"]["name"].as<std::string>(""),
              "sluice-config");
    // The copy step puts the CA pair and admin token where the config looks for them.
    const object* job = find(objs, "Job", "sluice-bootstrap");
    ASSERT_NE(job, nullptr) << "the overlay includes the base's bootstrap Job";
}

TEST(k8s_gateway, replicas_service_pdb_hpa_servicemonitor_and_networkpolicy_fit_together) {
    set_config_environment();
    const auto objs = overlay("gateway");
    const object* dep = find(objs, "Deployment", "sluice");
    ASSERT_NE(dep, nullptr);
    // The HPA owns the replica count: a `replicas` here would reset it on every apply.
    EXPECT_FALSE(dep->node["spec"]["replicas"]) << "replicas belongs to the HPA";
    const YAML::Node labels = dep->node["spec"]["template"]["metadata"]["labels"];
    auto selects_sluice = [&](const YAML::Node& match) {
        if (!match || match.size() == 0)
            return false;
        for (const auto& kv : match)
            if (labels[kv.first.as<std::string>()].as<std::string>("") !=
                kv.second.as<std::string>())
                return false;
        return true;
    };
    YAML::Node sluice;
    for (const auto& c : pod_spec(*dep)["containers"])
        if (is_sluice_server(c))
            sluice.reset(c);
    ASSERT_TRUE(sluice);

    const object* svc = find(objs, "Service", "sluice");
    ASSERT_NE(svc, nullptr);
    EXPECT_TRUE(selects_sluice(svc->node["spec"]["selector"]));
    std::set<std::string> service_ports;
    for (const auto& p : svc->node["spec"]["ports"]) {
        service_ports.insert(p["name"].as<std::string>());
        bool target = false;
        for (const auto& cp : sluice["ports"])
            target = target || cp["name"].as<std::string>("") == p["targetPort"].as<std::string>();
        EXPECT_TRUE(target) << "Service port " << p["name"].as<std::string>();
    }
    EXPECT_TRUE(service_ports.count("proxy"));
    EXPECT_TRUE(service_ports.count("metrics"));

    const object* pdb = find(objs, "PodDisruptionBudget", "sluice");
    ASSERT_NE(pdb, nullptr);
    EXPECT_TRUE(selects_sluice(pdb->node["spec"]["selector"]["matchLabels"]));

    const object* hpa = find(objs, "HorizontalPodAutoscaler", "sluice");
    ASSERT_NE(hpa, nullptr);
    EXPECT_LT(pdb->node["spec"]["minAvailable"].as<int>(99),
              hpa->node["spec"]["minReplicas"].as<int>(0));
    EXPECT_EQ(hpa->node["apiVersion"].as<std::string>(), "autoscaling/v2");
    EXPECT_EQ(hpa->node["spec"]["scaleTargetRef"]["kind"].as<std::string>(""), "Deployment");
    EXPECT_EQ(hpa->node["spec"]["scaleTargetRef"]["name"].as<std::string>(""), "sluice");
    EXPECT_GE(hpa->node["spec"]["minReplicas"].as<int>(0), 2);
    EXPECT_GT(hpa->node["spec"]["maxReplicas"].as<int>(0),
              hpa->node["spec"]["minReplicas"].as<int>(0));

    // Endpoints drain before sluice closes its listeners: a preStop sleep, and a grace
    // period that leaves time for SIGTERM's drain after it.
    const YAML::Node pre = sluice["lifecycle"]["preStop"]["exec"]["command"];
    ASSERT_TRUE(pre && pre.size() == 2) << "preStop: sleep N";
    EXPECT_EQ(pre[0].as<std::string>(), "sleep");
    const int sleep_s = pre[1].as<int>(0);
    EXPECT_GE(sleep_s, 5);
    EXPECT_GE(pod_spec(*dep)["terminationGracePeriodSeconds"].as<int>(0), sleep_s + 30);

    const object* sm = find(objs, "ServiceMonitor", "sluice");
    ASSERT_NE(sm, nullptr);
    for (const auto& kv : sm->node["spec"]["selector"]["matchLabels"])
        EXPECT_EQ(svc->node["metadata"]["labels"][kv.first.as<std::string>()].as<std::string>(""),
                  kv.second.as<std::string>());
    EXPECT_TRUE(service_ports.count(sm->node["spec"]["endpoints"][0]["port"].as<std::string>("")));

    // Agent pods: DNS and the gateway's proxy port, nothing else.
    const object* np = find(objs, "NetworkPolicy", "agents-egress-only-via-sluice");
    ASSERT_NE(np, nullptr);
    const YAML::Node np_spec = np->node["spec"];
    ASSERT_EQ(np_spec["policyTypes"].size(), 1u);
    EXPECT_EQ(np_spec["policyTypes"][0].as<std::string>(), "Egress");
    const std::string agent_key =
        np_spec["podSelector"]["matchLabels"].begin()->first.as<std::string>();
    const std::string agent_value =
        np_spec["podSelector"]["matchLabels"].begin()->second.as<std::string>();
    bool dns = false, gateway = false;
    for (const auto& rule : np_spec["egress"]) {
        ASSERT_TRUE(rule["to"] && rule["ports"])
            << "an egress rule without `to` or `ports` opens everything";
        for (const auto& to : rule["to"])
            EXPECT_FALSE(to["ipBlock"]) << "agents get no address block";
        for (const auto& p : rule["ports"]) {
            const int port = p["port"].as<int>();
            if (port == 53)
                dns = true;
            else if (port == 3128 && selects_sluice(rule["to"][0]["podSelector"]["matchLabels"]))
                gateway = true;
            else
                ADD_FAILURE() << "agents may reach port " << port;
        }
    }
    EXPECT_TRUE(dns);
    EXPECT_TRUE(gateway);
    const object* agent = find(objs, "Deployment", "patcher");
    ASSERT_NE(agent, nullptr);
    EXPECT_EQ(agent->node["spec"]["template"]["metadata"]["labels"][agent_key].as<std::string>(""),
              agent_value)
        << "the example agent is covered by the egress policy";

    // The config: a listener the Service reaches, and every ${VAR} it uses is in the
    // container's environment.
    const auto configs = configmap_configs(objs);
    ASSERT_EQ(configs.size(), 1u);
    auto loaded = sluice::config::load_string(configs[0].second, configs[0].first);
    ASSERT_TRUE(loaded.has_value()) << (loaded ? "" : loaded.error().front().str());
    ASSERT_EQ(loaded->listeners.size(), 1u);
    EXPECT_EQ(loaded->listeners[0].host, "0.0.0.0");
    EXPECT_GE(loaded->identities.size(), 2u) << "one identity per agent workload";
    const std::regex var{R"(\$\{([A-Za-z_][A-Za-z0-9_]*)\})"};
    for (std::sregex_iterator it(configs[0].second.begin(), configs[0].second.end(), var), end;
         it != end; ++it)
        EXPECT_TRUE(has_env(sluice, (*it)[1].str()))
            << (*it)[1].str() << " is not in the pod's env";
    expect_data_dir_prepared(pod_spec(*dep), sluice, *loaded);
    EXPECT_EQ(loaded->audit_path.parent_path().string(), mount_path(sluice, "sluice-audit"));
}

// Agents in other namespaces: NetworkPolicies are namespace-scoped, so the gateway ships
// an egress policy to apply in each agent namespace, reaching the gateway's pods across
// namespaces (namespaceSelector on the gateway overlay's namespace).
TEST(k8s_agent_namespace, egress_policy_reaches_only_dns_and_the_gateway_namespace) {
    const auto objs = objects_under(k8s_dir / "agent-namespace");
    const object* np = find(objs, "NetworkPolicy", "agents-egress-only-via-sluice");
    ASSERT_NE(np, nullptr);
    const YAML::Node k =
        YAML::LoadFile((k8s_dir / "agent-namespace" / "kustomization.yaml").string());
    EXPECT_FALSE(k["namespace"]) << "applied with -n AGENT_NS, in each agent namespace";
    const std::string gateway_ns =
        YAML::LoadFile(
            (k8s_dir / "overlays" / "gateway" / "kustomization.yaml").string())["namespace"]
            .as<std::string>("");
    ASSERT_FALSE(gateway_ns.empty());
    const YAML::Node spec = np->node["spec"];
    ASSERT_EQ(spec["policyTypes"].size(), 1u);
    EXPECT_EQ(spec["policyTypes"][0].as<std::string>(), "Egress");
    EXPECT_EQ(spec["podSelector"]["matchLabels"]["sluice.dev/egress"].as<std::string>(""),
              "gateway");
    bool dns = false, gateway = false;
    for (const auto& rule : spec["egress"]) {
        ASSERT_TRUE(rule["to"] && rule["ports"])
            << "a rule without `to` or `ports` opens everything";
        for (const auto& to : rule["to"])
            EXPECT_FALSE(to["ipBlock"]);
        for (const auto& p : rule["ports"]) {
            const int port = p["port"].as<int>();
            if (port == 53) {
                dns = true;
            } else if (port == 3128) {
                const YAML::Node to = rule["to"][0];
                EXPECT_EQ(to["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                              .as<std::string>(""),
                          gateway_ns);
                EXPECT_EQ(
                    to["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as<std::string>(""),
                    "sluice");
                gateway = true;
            } else {
                ADD_FAILURE() << "agents may reach port " << port;
            }
        }
    }
    EXPECT_TRUE(dns);
    EXPECT_TRUE(gateway);
}

// deploy/examples/sidecar.yaml is the sidecar ConfigMap's configuration (data dir on a
// subdirectory of the volume, CA and admin token copied there by sluice-files).
TEST(deploy_configs, sidecar_example_is_the_sidecar_configmap) {
    const auto configs = configmap_configs(overlay("sidecar"));
    ASSERT_EQ(configs.size(), 1u);
    const YAML::Node example = YAML::LoadFile((deploy_dir / "examples" / "sidecar.yaml").string());
    const YAML::Node configmap = YAML::Load(configs[0].second);
    EXPECT_EQ(YAML::Dump(example), YAML::Dump(configmap));
}

TEST(k8s_overlays, build_with_kubectl_kustomize) {
    std::string tool;
    if (have_tool("kustomize"))
        tool = "kustomize build";
    else if (have_tool("kubectl"))
        tool = "kubectl kustomize";
    else
        GTEST_SKIP()
            << "neither kustomize nor kubectl is installed; the overlays' build is not checked";
    for (const char* o : {"sidecar", "gateway"}) {
        const auto r = run_command(tool + " " + (k8s_dir / "overlays" / o).string());
        ASSERT_EQ(r.status, 0) << o << ":\n" << r.output;
        const auto docs = YAML::LoadAll(r.output);
        EXPECT_GE(docs.size(), 6u) << o;
        for (const auto& d : docs) {
            const std::string kind = d["kind"].as<std::string>("");
            if (kind != "Namespace") {
                EXPECT_TRUE(d["metadata"]["namespace"]) << o << ": " << kind << " has no namespace";
            }
            if (!workload_kinds.count(kind))
                continue;
            for (const auto& c : all_containers(d["spec"]["template"]["spec"])) {
                const std::string image = c["image"].as<std::string>();
                EXPECT_NE(image.find(':'), std::string::npos)
                    << o << ": image " << image << " has no tag after the images transformer";
            }
        }
    }
}

// ------------------------------------------------------------------ sluice configurations

TEST(deploy_configs, every_shipped_config_passes_the_config_loader) {
    set_config_environment();
    std::size_t n = 0;
    for (const auto& f : yaml_files(deploy_dir / "examples")) {
        auto loaded = sluice::config::load_file(f);
        EXPECT_TRUE(loaded.has_value())
            << f << ": " << (loaded ? "" : loaded.error().front().str());
        ++n;
    }
    EXPECT_GE(n, 6u);
    for (const auto& [where, text] : configmap_configs(objects_under(k8s_dir))) {
        auto loaded = sluice::config::load_string(text, where);
        EXPECT_TRUE(loaded.has_value())
            << where << ": " << (loaded ? "" : loaded.error().front().str());
        ++n;
    }
    EXPECT_GE(n, 8u);
}

TEST(deploy_configs, the_binary_check_config_accepts_the_configmaps) {
    set_config_environment();
    if (::access(sluice_bin.c_str(), X_OK) != 0)
        GTEST_SKIP() << "the sluice binary is not built at " << sluice_bin;
    const fs::path dir =
        fs::temp_directory_path() / ("sluice-deploy-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    int i = 0;
    for (const auto& [where, text] : configmap_configs(objects_under(k8s_dir))) {
        const fs::path f = dir / ("configmap-" + std::to_string(i++) + ".yaml");
        std::ofstream(f) << text;
        const auto r = run_command(sluice_bin + " check-config " + f.string());
        EXPECT_EQ(r.status, 0) << where << ":\n" << r.output;
    }
    // And it does reject a broken one, so the status above means something.
    std::ofstream(dir / "broken.yaml") << "version: 1\nlisteners: [{address: nowhere}]\nbogus: 1\n";
    EXPECT_EQ(run_command(sluice_bin + " check-config " + (dir / "broken.yaml").string()).status,
              2);
    fs::remove_all(dir);
}

// ------------------------------------------------------------------ Dockerfile

struct instruction {
    std::string keyword; // upper case
    std::string args;
};

std::vector<instruction> dockerfile() {
    std::istringstream in(read_text(deploy_dir / "Dockerfile"));
    std::vector<instruction> out;
    std::string line, logical;
    while (std::getline(in, line)) {
        if (logical.empty() && (line.empty() || line[0] == '#'))
            continue;
        if (!line.empty() && line.back() == '\\') {
            logical += line.substr(0, line.size() - 1) + " ";
            continue;
        }
        logical += line;
        const auto sp = logical.find_first_of(" \t");
        std::string kw = logical.substr(0, sp);
        std::transform(kw.begin(), kw.end(), kw.begin(), ::toupper);
        out.push_back({kw, sp == std::string::npos ? "" : logical.substr(sp + 1)});
        logical.clear();
    }
    return out;
}

// The instructions of the last stage (after the last FROM).
std::vector<instruction> runtime_stage(const std::vector<instruction>& all) {
    std::vector<instruction> out;
    for (const auto& i : all) {
        if (i.keyword == "FROM")
            out.clear();
        out.push_back(i);
    }
    return out;
}

TEST(dockerfile, multi_stage_debian_non_root_healthcheck_entrypoint) {
    const auto all = dockerfile();
    std::vector<std::string> froms;
    for (const auto& i : all)
        if (i.keyword == "FROM")
            froms.push_back(i.args);
    ASSERT_GE(froms.size(), 2u) << "multi-stage: a build stage and a runtime stage";
    EXPECT_EQ(froms.front().rfind("debian:12 ", 0), 0u) << froms.front();
    const std::string build_stage = froms.front().substr(froms.front().rfind(' ') + 1);
    EXPECT_EQ(froms.back().rfind("debian:12-slim", 0), 0u) << froms.back();

    bool installs_deps = false, builds = false;
    for (const auto& i : all) {
        installs_deps =
            installs_deps ||
            (i.keyword == "RUN" && i.args.find("deploy/install-deps.sh") != std::string::npos);
        builds =
            builds || (i.keyword == "RUN" && i.args.find("cmake --build") != std::string::npos);
    }
    EXPECT_TRUE(installs_deps) << "the build stage uses deploy/install-deps.sh";
    EXPECT_TRUE(builds);

    const auto rt = runtime_stage(all);
    std::string user, healthcheck, entrypoint, cmd, volume;
    bool copies_binary = false;
    std::string config_copied_to;
    for (const auto& i : rt) {
        if (i.keyword == "USER")
            user = i.args;
        if (i.keyword == "HEALTHCHECK")
            healthcheck = i.args;
        if (i.keyword == "ENTRYPOINT")
            entrypoint = i.args;
        if (i.keyword == "CMD")
            cmd = i.args;
        if (i.keyword == "VOLUME")
            volume = i.args;
        if (i.keyword == "COPY" && i.args.find("--from=" + build_stage) != std::string::npos &&
            i.args.find("sluice") != std::string::npos)
            copies_binary = true;
        if (i.keyword == "COPY" && i.args.find("deploy/examples/") != std::string::npos)
            config_copied_to = i.args.substr(i.args.rfind(' ') + 1);
        EXPECT_FALSE(i.keyword == "RUN" && i.args.find("-dev") != std::string::npos)
            << "the runtime stage installs a -dev package: " << i.args;
    }
    EXPECT_TRUE(copies_binary) << "COPY --from=" << build_stage << " the binary";
    ASSERT_FALSE(user.empty()) << "no USER in the runtime stage";
    EXPECT_NE(user.substr(0, user.find(':')), "root");
    EXPECT_NE(user.substr(0, user.find(':')), "0");
    EXPECT_NE(healthcheck.find("CMD"), std::string::npos);
    EXPECT_NE(healthcheck.find("/healthz"), std::string::npos) << healthcheck;
    EXPECT_NE(healthcheck.find("9901"), std::string::npos) << healthcheck;
    EXPECT_EQ(entrypoint, R"(["sluice"])");
    EXPECT_NE(cmd.find(R"("run")"), std::string::npos) << cmd;
    EXPECT_NE(cmd.find("\"" + config_copied_to + "\""), std::string::npos)
        << "CMD runs the config the image ships (" << config_copied_to << "): " << cmd;
    EXPECT_NE(volume.find("/var/lib/sluice"), std::string::npos) << "the data dir is a volume";

    // The shipped container config keeps its state in that volume.
    set_config_environment();
    auto loaded = sluice::config::load_file(deploy_dir / "examples" / "container.yaml");
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->data_dir, "/var/lib/sluice");
    EXPECT_EQ(loaded->audit_path.parent_path(), loaded->data_dir);
    EXPECT_EQ(port_of(loaded->admin_address), "9901") << "the HEALTHCHECK's port";
}

TEST(dockerfile, runtime_packages_cover_every_library_the_binary_links) {
    if (::access(sluice_bin.c_str(), X_OK) != 0)
        GTEST_SKIP() << "the sluice binary is not built at " << sluice_bin;
    if (!have_tool("ldd") || !have_tool("dpkg"))
        GTEST_SKIP() << "ldd or dpkg is missing; the runtime package list is not checked";
#ifdef SLUICE_BINARY_UNLIKE_IMAGE
    // The image builds an optimised, unsanitized binary; a Debug or sanitizer build links
    // other libraries (sanitizer runtimes, Boost.Container), so it says nothing about it.
    GTEST_SKIP() << "this build (Debug or sanitizers) does not link like the image's";
#endif
    std::set<std::string> installed;
    for (const auto& i : runtime_stage(dockerfile())) {
        if (i.keyword != "RUN" || i.args.find("apt-get install") == std::string::npos)
            continue;
        // The words after `apt-get install`, up to the end of that command.
        std::istringstream words(i.args.substr(i.args.find("apt-get install") + 15));
        for (std::string w; words >> w && w != "&&" && w != ";";)
            if (w[0] != '-')
                installed.insert(w);
    }
    ASSERT_TRUE(installed.count("ca-certificates"));
    // Every name is a Debian package (installed here, as the -dev packages pull in the
    // runtime libraries, or known to apt).
    for (const auto& pkg : installed) {
        const auto known = run_command("dpkg-query -W " + pkg + " || apt-cache show " + pkg);
        EXPECT_EQ(known.status, 0) << pkg << " is not a known Debian package:\n" << known.output;
    }
    // Present in debian:12-slim (essential or required by apt), or pulled in by a listed one.
    const std::set<std::string> in_base{"libc6", "libstdc++6", "libgcc-s1", "libcivetweb1"};
    const auto ldd = run_command("ldd " + sluice_bin);
    ASSERT_EQ(ldd.status, 0) << ldd.output;
    std::istringstream lines(ldd.output);
    std::size_t checked = 0;
    for (std::string line; std::getline(lines, line);) {
        const auto arrow = line.find("=> /");
        if (arrow == std::string::npos)
            continue;
        std::string lib = line.substr(arrow + 3);
        lib = lib.substr(0, lib.find(' '));
        // A sanitizer build (SLUICE_SANITIZE) links its runtimes; the image never has them.
        const std::string base = fs::path(lib).filename().string();
        if (base.starts_with("libasan.") || base.starts_with("libubsan.") ||
            base.starts_with("liblsan.") || base.starts_with("libtsan."))
            continue;
        // usrmerge: dpkg may know the file under /lib or /usr/lib, by either name.
        const std::string real = fs::canonical(lib).string();
        std::string tries;
        for (const std::string& p : {lib, real})
            tries += " " + p + (p.rfind("/usr/", 0) == 0 ? " " + p.substr(4) : " /usr" + p);
        const auto owner =
            run_command("for p in" + tries + "; do dpkg -S \"$p\" 2>/dev/null && break; done");
        if (owner.status != 0) {
            ADD_FAILURE() << lib << " belongs to no Debian package: " << owner.output;
            continue;
        }
        std::string pkg = owner.output.substr(0, owner.output.find(':'));
        ++checked;
        EXPECT_TRUE(installed.count(pkg) || in_base.count(pkg))
            << lib << " comes from " << pkg << ", which the runtime stage does not install";
    }
    EXPECT_GE(checked, 15u);
}

// ------------------------------------------------------------------ systemd

std::map<std::string, std::vector<std::string>> unit_keys(const std::string& text) {
    std::map<std::string, std::vector<std::string>> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#' || line[0] == '[')
            continue;
        const auto eq = line.find('=');
        if (eq != std::string::npos)
            out[line.substr(0, eq)].push_back(line.substr(eq + 1));
    }
    return out;
}

TEST(systemd_unit, hardening_state_dirs_and_reload) {
    const auto keys = unit_keys(read_text(deploy_dir / "systemd" / "sluice.service"));
    auto one = [&](const std::string& k) {
        auto it = keys.find(k);
        return it == keys.end() ? std::string("<missing>") : it->second.back();
    };
    EXPECT_EQ(one("NoNewPrivileges"), "yes");
    EXPECT_EQ(one("ProtectSystem"), "strict");
    EXPECT_EQ(one("PrivateTmp"), "yes");
    EXPECT_EQ(one("ProtectHome"), "yes");
    EXPECT_EQ(one("CapabilityBoundingSet"), "") << "an empty bounding set";
    EXPECT_EQ(one("StateDirectory"), "sluice");
    EXPECT_EQ(one("LogsDirectory"), "sluice");
    EXPECT_EQ(one("ExecReload"), "/bin/kill -HUP $MAINPID");
    EXPECT_EQ(one("Restart"), "always") << "any unexpected exit (a signal included) restarts it";
    EXPECT_NE(one("ExecStart").find(" run --config /etc/sluice/sluice.yaml"), std::string::npos);

    // The config the unit runs is deploy/examples/systemd.yaml; its writable paths are the
    // unit's state and log directories (everything else is read-only).
    auto loaded = sluice::config::load_file(deploy_dir / "examples" / "systemd.yaml");
    ASSERT_TRUE(loaded.has_value()) << loaded.error().front().str();
    EXPECT_EQ(loaded->data_dir, "/var/lib/" + one("StateDirectory"));
    EXPECT_EQ(loaded->audit_path.parent_path(), "/var/log/" + one("LogsDirectory"));
    EXPECT_EQ(loaded->ca_cert.parent_path(), loaded->data_dir);
    // What the unit publishes for clients is the CA the config uses.
    bool publishes = false;
    for (const auto& pre : keys.at("ExecStartPre"))
        publishes = publishes ||
                    pre.find(loaded->ca_cert.string() + " /run/sluice/ca.pem") != std::string::npos;
    EXPECT_TRUE(publishes) << "ExecStartPre copies " << loaded->ca_cert << " to /run/sluice/ca.pem";
}

TEST(systemd_unit, systemd_analyze_verify_and_security) {
    if (!have_tool("systemd-analyze"))
        GTEST_SKIP() << "systemd-analyze is not installed; the unit is not verified";
    if (::access(sluice_bin.c_str(), X_OK) != 0)
        GTEST_SKIP() << "the sluice binary is not built at " << sluice_bin;
    // verify checks that every Exec path exists: point the copy at the built binary.
    const fs::path dir = fs::temp_directory_path() / ("sluice-unit-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::string text = read_text(deploy_dir / "systemd" / "sluice.service");
    const std::string installed = "/usr/local/bin/sluice";
    ASSERT_NE(text.find(installed), std::string::npos);
    for (auto at = text.find(installed); at != std::string::npos; at = text.find(installed, at))
        text.replace(at, installed.size(), sluice_bin);
    const fs::path unit = dir / "sluice.service";
    std::ofstream(unit) << text;
    const auto verify = run_command("systemd-analyze verify " + unit.string());
    EXPECT_EQ(verify.status, 0) << verify.output;
    EXPECT_EQ(verify.output, "") << "systemd-analyze verify warns";
    // The same verify does flag a broken unit (so an empty output above means something).
    std::ofstream(dir / "broken.service") << text << "\n[Service]\nNoNewPrivileges=maybe\n";
    EXPECT_NE(run_command("systemd-analyze verify " + (dir / "broken.service").string()).output,
              "");
    // Exposure score (0 best, 10 worst): fail above 2.0.
    const auto sec =
        run_command("systemd-analyze security --offline=yes --threshold=20 " + unit.string());
    if (sec.output.find("Unknown option") != std::string::npos ||
        sec.output.find("unrecognized option") != std::string::npos)
        GTEST_LOG_(INFO) << "systemd-analyze security --offline is not supported here";
    else
        EXPECT_EQ(sec.status, 0) << sec.output;
    fs::remove_all(dir);
}

} // namespace
