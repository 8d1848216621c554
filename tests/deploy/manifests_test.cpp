// Static checks of what runs sluice elsewhere (deploy/): the Kubernetes manifests under
// deploy/k8s (YAML parses, each object has the fields the API needs, workloads are
// hardened, kustomizations name files that exist, the overlays fit together), the sluice
// configurations shipped in ConfigMaps and deploy/examples (loaded by sluice's own config
// loader); the gateway's fleet pieces (Redis NetworkPolicy, audit shipping) are in
// gateway_fleet_test.cpp, the Dockerfile and the systemd unit in image_and_unit_test.cpp.
// Optional tools: kubectl or kustomize (overlays build); each test that needs one skips,
// naming it, when it is missing.
#include "deploy_test_support.hpp"

namespace {

using namespace sluice_deploy_test;

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
                // An optional piece is a Component, which an overlay lists in `components`.
                if (kind == "Component")
                    EXPECT_EQ(api, "kustomize.config.k8s.io/v1alpha1") << f;
                else
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
        for (const auto& pt : k["patches"]) {
            if (!pt["path"])
                continue;
            const fs::path p = fs::weakly_canonical(f.parent_path() / pt["path"].as<std::string>());
            EXPECT_TRUE(fs::is_regular_file(p)) << f << ": patch " << p << " is missing";
            used.insert(p);
        }
        for (const auto& c : k["components"]) {
            const fs::path p = f.parent_path() / c.as<std::string>() / "kustomization.yaml";
            ASSERT_TRUE(fs::exists(p)) << f << ": component " << c.as<std::string>();
            EXPECT_EQ(YAML::LoadFile(p.string())["kind"].as<std::string>(""), "Component") << p;
        }
    }
    for (const auto& f : yaml_files(k8s_dir)) {
        if (!is_kustomization(f)) {
            EXPECT_TRUE(used.count(fs::weakly_canonical(f)))
                << f << " is not listed in any kustomization's resources or patches";
        }
    }
    for (const char* o : {"base", "overlays/sidecar", "overlays/gateway"})
        EXPECT_TRUE(fs::exists(k8s_dir / o / "kustomization.yaml")) << o;
}

TEST(k8s_manifests, workload_containers_are_hardened_and_bounded) {
    std::size_t containers = 0;
    for (const auto& o : objects_under(k8s_dir))
        if (workload_kinds.count(o.kind()))
            expect_workload_hardened(o, containers);
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

    // The replicas share the kill switch, limits and approvals: the store's URL (with its
    // password) comes from a Secret, never from the ConfigMap.
    ASSERT_TRUE(loaded->control_store.has_value()) << "the gateway needs control_store";
    EXPECT_EQ(loaded->control_store->url, redis_url);
    EXPECT_NE(configs[0].second.find("url: \"${SLUICE_REDIS_URL}\""), std::string::npos);
    EXPECT_FALSE(loaded->control_store->fail_closed) << "on_unavailable: last_known";
    EXPECT_EQ(loaded->control_store->key_prefix, "sluice:");
    bool from_secret = false;
    for (const auto& e : sluice["env"])
        if (e["name"].as<std::string>("") == "SLUICE_REDIS_URL")
            from_secret = e["valueFrom"]["secretKeyRef"]["name"].as<std::string>("") != "";
    EXPECT_TRUE(from_secret) << "SLUICE_REDIS_URL comes from a Secret";
    // No agent reaches Redis through sluice either: cluster addresses stay refused.
    for (const auto& p : loaded->policies)
        EXPECT_TRUE(p.private_destinations.empty())
            << "policy " << p.identity << " opens private destinations";
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
    // The gateway with the optional audit-shipping component, as deploy/README.md says to
    // use it from an overlay of one's own: a temporary one next to nothing in the tree.
    const fs::path own =
        fs::temp_directory_path() / ("sluice-kustomize-" + std::to_string(::getpid()));
    fs::create_directories(own);
    const fs::path gateway = k8s_dir / "overlays" / "gateway";
    std::ofstream(own / "kustomization.yaml")
        << "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        << "namespace: sluice-gateway\nresources:\n  - " << fs::relative(gateway, own).string()
        << "\ncomponents:\n  - " << fs::relative(gateway / "audit-shipping", own).string() << "\n";
    const std::vector<std::pair<std::string, fs::path>> builds{
        {"sidecar", k8s_dir / "overlays" / "sidecar"},
        {"gateway", gateway},
        {"gateway + audit-shipping", own}};
    for (const auto& [o, path] : builds) {
        const auto r = run_command(tool + " " + path.string());
        ASSERT_EQ(r.status, 0) << o << ":\n" << r.output;
        const auto docs = YAML::LoadAll(r.output);
        EXPECT_GE(docs.size(), 6u) << o;
        bool shipper = false;
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
                shipper = shipper || c["name"].as<std::string>("") == "audit-shipper";
            }
        }
        EXPECT_EQ(shipper, path == own) << o << ": the audit-shipper is only there when asked";
    }
    fs::remove_all(own);
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

} // namespace
