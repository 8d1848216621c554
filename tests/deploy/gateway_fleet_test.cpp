// The gateway overlay's fleet pieces (issue 22): the Redis the replicas share admits only
// the sluice pods and no policy lets agents reach it; the optional audit-shipping
// Component adds a hardened, read-only Vector sidecar that sends every audit line as it
// is. Static checks with yaml-cpp and sluice's config loader (kustomize builds the
// component in manifests_test.cpp, where installed).
#include "deploy_test_support.hpp"

namespace {

using namespace sluice_deploy_test;

// The fleet's Redis (which the overlay does not ship) admits only the sluice pods: an
// agent that could write the store could revive itself. Its own pods may reach each
// other (replication, Sentinel); no one else, and no ipBlock.
TEST(k8s_gateway, redis_admits_only_the_sluice_pods) {
    const auto objs = overlay("gateway");
    const object* dep = find(objs, "Deployment", "sluice");
    const object* np = find(objs, "NetworkPolicy", "redis-ingress-only-from-sluice");
    ASSERT_NE(dep, nullptr);
    ASSERT_NE(np, nullptr) << "redis-networkpolicy.yaml is in the gateway's resources";
    const std::string gateway_ns =
        YAML::LoadFile(
            (k8s_dir / "overlays" / "gateway" / "kustomization.yaml").string())["namespace"]
            .as<std::string>("");
    const YAML::Node sluice_labels = dep->node["spec"]["template"]["metadata"]["labels"];
    const YAML::Node spec = np->node["spec"];
    const YAML::Node redis_selector = spec["podSelector"];
    ASSERT_EQ(redis_selector["matchLabels"].size(), 1u);
    EXPECT_EQ(redis_selector["matchLabels"]["app.kubernetes.io/name"].as<std::string>(""), "redis");
    EXPECT_FALSE(redis_selector["matchExpressions"]);
    ASSERT_EQ(spec["policyTypes"].size(), 1u);
    EXPECT_EQ(spec["policyTypes"][0].as<std::string>(), "Ingress");

    const std::set<int> redis_ports{6379, 6380}, peer_ports{6379, 6380, 26379};
    std::vector<YAML::Node> sluice_peers;
    for (const auto& rule : spec["ingress"]) {
        ASSERT_TRUE(rule["from"] && rule["from"].size() > 0 && rule["ports"] &&
                    rule["ports"].size() > 0)
            << "an ingress rule without `from` or `ports` admits every pod or every port";
        std::set<int> ports;
        for (const auto& p : rule["ports"]) {
            EXPECT_EQ(p["protocol"].as<std::string>("TCP"), "TCP");
            EXPECT_FALSE(p["endPort"]) << "no port ranges";
            ports.insert(p["port"].as<int>());
        }
        for (const auto& from : rule["from"]) {
            EXPECT_FALSE(from["ipBlock"]) << "Redis admits no address block";
            const YAML::Node pods = from["podSelector"];
            ASSERT_TRUE(pods && pods["matchLabels"] && pods["matchLabels"].size() > 0)
                << "every peer names the pods it admits";
            if (selects(pods, sluice_labels)) {
                // The gateway's pods, by namespace name, never an agent (sluice.dev/egress).
                EXPECT_EQ(from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                              .as<std::string>(""),
                          gateway_ns);
                EXPECT_EQ(from["namespaceSelector"]["matchLabels"].size(), 1u);
                YAML::Node with_agent_label = YAML::Clone(sluice_labels);
                with_agent_label["sluice.dev/egress"] = "gateway";
                EXPECT_FALSE(selects(pods, with_agent_label))
                    << "a pod labelled as an agent must not pass as sluice";
                for (int p : ports)
                    EXPECT_TRUE(redis_ports.count(p)) << "sluice pods may reach port " << p;
                sluice_peers.push_back(from);
            } else {
                // Redis's own pods (replicas, Sentinels), in the policy's namespace.
                EXPECT_EQ(YAML::Dump(pods), YAML::Dump(redis_selector)) << YAML::Dump(from);
                EXPECT_FALSE(from["namespaceSelector"]) << YAML::Dump(from);
                for (int p : ports)
                    EXPECT_TRUE(peer_ports.count(p)) << "Redis peers on port " << p;
            }
        }
    }
    EXPECT_EQ(sluice_peers.size(), 1u) << "one rule admits the sluice pods";

    // No agent pod anywhere in deploy/k8s passes for sluice or for Redis.
    std::size_t agents = 0;
    for (const auto& o : objects_under(k8s_dir)) {
        if (!workload_kinds.count(o.kind()))
            continue;
        bool agent = false;
        for (const auto& c : all_containers(pod_spec(o)))
            agent = agent || c["image"].as<std::string>("") == "agent";
        if (!agent)
            continue;
        ++agents;
        const YAML::Node labels = o.node["spec"]["template"]["metadata"]["labels"];
        EXPECT_FALSE(selects(redis_selector, labels)) << o.where();
        for (const auto& peer : sluice_peers)
            EXPECT_FALSE(selects(peer["podSelector"], labels))
                << o.where() << " would be admitted to Redis";
    }
    EXPECT_GE(agents, 2u);
}

// Every NetworkPolicy that restricts the gateway's agents' egress (here and in
// deploy/k8s/agent-namespace) keeps them off Redis: no Redis port, no Redis pod, no
// address block, no rule without `to` or `ports`. The sluice pods have no egress policy
// (they reach the Internet and Redis).
TEST(k8s_gateway, no_policy_lets_agents_reach_redis) {
    const auto objs = overlay("gateway");
    const object* agent = find(objs, "Deployment", "patcher");
    const object* dep = find(objs, "Deployment", "sluice");
    const object* redis_np = find(objs, "NetworkPolicy", "redis-ingress-only-from-sluice");
    ASSERT_NE(agent, nullptr);
    ASSERT_NE(dep, nullptr);
    ASSERT_NE(redis_np, nullptr);
    const YAML::Node agent_labels = agent->node["spec"]["template"]["metadata"]["labels"];
    const YAML::Node sluice_labels = dep->node["spec"]["template"]["metadata"]["labels"];
    const YAML::Node redis_labels = redis_np->node["spec"]["podSelector"]["matchLabels"];
    const std::set<int> redis_ports{6379, 6380, 26379};
    std::size_t egress_policies = 0;
    for (const auto& o : objects_under(k8s_dir)) {
        if (o.kind() != "NetworkPolicy")
            continue;
        const YAML::Node spec = o.node["spec"];
        bool egress = false;
        for (const auto& t : spec["policyTypes"])
            egress = egress || t.as<std::string>() == "Egress";
        if (egress && selects(spec["podSelector"], sluice_labels))
            ADD_FAILURE() << o.where() << " restricts the sluice pods' egress";
        if (!egress || !selects(spec["podSelector"], agent_labels))
            continue;
        ++egress_policies;
        for (const auto& rule : spec["egress"]) {
            ASSERT_TRUE(rule["to"] && rule["to"].size() > 0 && rule["ports"] &&
                        rule["ports"].size() > 0)
                << o.where() << ": an egress rule without `to` or `ports` opens everything";
            for (const auto& p : rule["ports"])
                EXPECT_FALSE(redis_ports.count(p["port"].as<int>()))
                    << o.where() << ": agents may reach port " << p["port"].as<int>();
            for (const auto& to : rule["to"]) {
                EXPECT_FALSE(to["ipBlock"]) << o.where() << ": agents get no address block";
                EXPECT_FALSE(selects(to["podSelector"], redis_labels))
                    << o.where() << ": agents may reach the Redis pods";
            }
        }
    }
    EXPECT_EQ(egress_policies, 2u) << "the gateway's and agent-namespace's egress policies";
}

// The optional audit-shipping Component: a Vector sidecar added to the gateway's pods that
// reads the audit files (the configured path, on the audit volume mounted read-only, never
// the data dir) and sends every line as it is, in order, to a receiver that keeps one file
// per pod. Checked applied to the gateway's Deployment, with every check a workload gets.
TEST(k8s_gateway_audit_shipping, component_adds_a_hardened_read_only_shipper) {
    set_config_environment();
    const fs::path dir = k8s_dir / "overlays" / "gateway" / "audit-shipping";
    const YAML::Node k = YAML::LoadFile((dir / "kustomization.yaml").string());
    EXPECT_EQ(k["kind"].as<std::string>(""), "Component");
    EXPECT_FALSE(k["namespace"]) << "the overlay that lists the component sets it";
    // Optional: the gateway overlay as shipped does not include it.
    const YAML::Node gk =
        YAML::LoadFile((k8s_dir / "overlays" / "gateway" / "kustomization.yaml").string());
    for (const char* key : {"resources", "components"})
        for (const auto& r : gk[key])
            EXPECT_EQ(r.as<std::string>().find("audit-shipping"), std::string::npos)
                << "the default gateway overlay stays without audit shipping";

    std::vector<object> own;
    for (const auto& r : k["resources"])
        for (const auto& doc : YAML::LoadAllFromFile((dir / r.as<std::string>()).string()))
            if (doc && !doc.IsNull())
                own.push_back(object{dir / r.as<std::string>(), doc});
    ASSERT_EQ(k["patches"].size(), 1u);
    const YAML::Node target = k["patches"][0]["target"];
    EXPECT_EQ(target["kind"].as<std::string>(""), "Deployment");
    EXPECT_EQ(target["name"].as<std::string>(""), "sluice");
    const YAML::Node patch =
        YAML::LoadFile((dir / k["patches"][0]["path"].as<std::string>()).string());
    EXPECT_EQ(patch["kind"].as<std::string>(""), "Deployment");
    EXPECT_EQ(patch["metadata"]["name"].as<std::string>(""), "sluice");

    // Apply the patch as a strategic merge would: lists merged by name. Every name it adds
    // is new, so merging is appending.
    const auto objs = overlay("gateway");
    const object* dep = find(objs, "Deployment", "sluice");
    ASSERT_NE(dep, nullptr);
    object merged{dep->file, YAML::Clone(dep->node)};
    YAML::Node spec = merged.node["spec"]["template"]["spec"];
    const YAML::Node add = patch["spec"]["template"]["spec"];
    ASSERT_TRUE(add && add.IsMap());
    for (const auto& key_node : add) {
        const std::string key = key_node.first.as<std::string>();
        ASSERT_TRUE(key == "initContainers" || key == "containers" || key == "volumes") << key;
        for (const auto& item : key_node.second) {
            for (const auto& have : all_containers(spec))
                EXPECT_NE(have["name"].as<std::string>(), item["name"].as<std::string>(""));
            for (const auto& have : spec["volumes"])
                EXPECT_NE(have["name"].as<std::string>(), item["name"].as<std::string>(""));
            spec[key].push_back(YAML::Clone(item));
        }
    }
    std::size_t containers = 0;
    expect_workload_hardened(merged, containers);

    YAML::Node shipper, sluice;
    for (const auto& c : add["initContainers"])
        shipper.reset(c);
    for (const auto& c : spec["containers"])
        if (is_sluice_server(c))
            sluice.reset(c);
    ASSERT_TRUE(shipper) << "the shipper is a native sidecar (an init container)";
    ASSERT_TRUE(sluice);
    std::size_t added = 0;
    for (const char* key : {"initContainers", "containers"})
        for (const auto& c : add[key])
            added += c ? 1 : 0;
    ASSERT_EQ(added, 1u) << "one container: the shipper";
    EXPECT_EQ(shipper["restartPolicy"].as<std::string>(""), "Always");
    EXPECT_TRUE(std::regex_match(shipper["image"].as<std::string>(""),
                                 std::regex{R"(timberio/vector:[0-9]+\.[0-9]+\.[0-9]+-[a-z-]+)"}))
        << "Vector pinned to a release: " << shipper["image"].as<std::string>("");
    // It reads files written by sluice's user with mode 0600: the same user.
    const int pod_user = spec["securityContext"]["runAsUser"].as<int>(-1);
    EXPECT_EQ(shipper["securityContext"]["runAsUser"].as<int>(pod_user),
              sluice["securityContext"]["runAsUser"].as<int>(pod_user));

    // Mounts: the audit volume read-only where sluice has it; its own config (read-only)
    // and an emptyDir for checkpoints; nothing else (no Secret, no data dir).
    std::string config_dir, state_dir;
    for (const auto& m : shipper["volumeMounts"]) {
        const std::string name = m["name"].as<std::string>();
        const YAML::Node v = volume(spec, name);
        EXPECT_FALSE(v["secret"]) << "the shipper mounts a Secret: " << name;
        EXPECT_NE(name, "sluice-data") << "never the data dir (CA key, admin token)";
        if (name == "sluice-audit") {
            EXPECT_TRUE(m["readOnly"].as<bool>(false)) << "the audit volume, read-only";
            EXPECT_EQ(m["mountPath"].as<std::string>(), mount_path(sluice, "sluice-audit"));
        } else if (v["configMap"]) {
            EXPECT_TRUE(m["readOnly"].as<bool>(false));
            config_dir = m["mountPath"].as<std::string>();
            ASSERT_NE(find(own, "ConfigMap", v["configMap"]["name"].as<std::string>("")), nullptr)
                << "the component ships the ConfigMap it mounts";
        } else {
            EXPECT_TRUE(v["emptyDir"]) << name;
            state_dir = m["mountPath"].as<std::string>();
        }
    }
    ASSERT_FALSE(mount_path(shipper, "sluice-audit").empty());
    ASSERT_FALSE(config_dir.empty());
    const YAML::Node args = shipper["args"];
    ASSERT_TRUE(args && args.size() == 2) << "--config FILE";
    EXPECT_EQ(args[0].as<std::string>(), "--config");
    const std::string config_file = args[1].as<std::string>();
    ASSERT_EQ(fs::path(config_file).parent_path().string(), config_dir);

    // Vector's configuration.
    std::string text;
    for (const auto& o : own)
        if (o.kind() == "ConfigMap" && o.node["data"][fs::path(config_file).filename().string()])
            text = o.node["data"][fs::path(config_file).filename().string()].as<std::string>();
    ASSERT_FALSE(text.empty()) << config_file << " is not in the component's ConfigMap";
    const YAML::Node vc = YAML::Load(text);
    EXPECT_EQ(vc["data_dir"].as<std::string>(""), state_dir) << "checkpoints on the emptyDir";
    const std::regex var{R"(\$\{([A-Za-z_][A-Za-z0-9_]*)\})"};
    for (std::sregex_iterator it(text.begin(), text.end(), var), end; it != end; ++it)
        EXPECT_TRUE(has_env(shipper, (*it)[1].str())) << (*it)[1].str() << " is not in the env";
    for (const auto& e : shipper["env"])
        if (e["name"].as<std::string>("") == "POD_NAME") {
            EXPECT_EQ(e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(""), "metadata.name");
        }

    // The source: the configured audit file and its rotated files, every line as it is
    // (no transcoding, no multiline joining), from the beginning, oldest file first.
    const auto configs = configmap_configs(objs);
    ASSERT_EQ(configs.size(), 1u);
    auto loaded = sluice::config::load_string(configs[0].second, configs[0].first);
    ASSERT_TRUE(loaded.has_value()) << (loaded ? "" : loaded.error().front().str());
    ASSERT_EQ(vc["sources"].size(), 1u);
    const std::string source = vc["sources"].begin()->first.as<std::string>();
    const YAML::Node src = vc["sources"].begin()->second;
    EXPECT_EQ(src["type"].as<std::string>(""), "file");
    ASSERT_EQ(src["include"].size(), 1u);
    EXPECT_EQ(src["include"][0].as<std::string>(), loaded->audit_path.string() + "*")
        << "the live file and its rotated files (audit.jsonl.<stamp>.<seq>)";
    EXPECT_EQ(src["read_from"].as<std::string>(""), "beginning");
    EXPECT_TRUE(src["oldest_first"].as<bool>(false)) << "finish a rotated file first";
    EXPECT_GE(src["max_line_bytes"].as<std::uint64_t>(0), 1u << 20);
    for (const char* changes : {"encoding", "multiline", "line_delimiter", "ignore_older_secs",
                                "remove_after_secs", "exclude"})
        EXPECT_FALSE(src[changes]) << "the source sets " << changes;

    // Transforms only add fields beside `message`; the lines stay untouched.
    std::set<std::string> untouched{source};
    for (const auto& t : vc["transforms"]) {
        const std::string name = t.first.as<std::string>();
        EXPECT_EQ(t.second["type"].as<std::string>(""), "remap") << name;
        EXPECT_EQ(t.second["source"].as<std::string>("").find("message"), std::string::npos)
            << name << " touches the line";
        for (const auto& in : t.second["inputs"])
            EXPECT_TRUE(untouched.count(in.as<std::string>())) << name;
        untouched.insert(name);
    }
    EXPECT_NE(text.find(".pod = \"${POD_NAME}\""), std::string::npos)
        << "each event names its pod (one chain)";

    // Sinks: one request in flight (order), acknowledged (no line counted as sent before
    // the receiver has it), blocking when full (never dropping), the line as it is.
    ASSERT_GE(vc["sinks"].size(), 1u);
    for (const auto& sk : vc["sinks"]) {
        const std::string name = sk.first.as<std::string>();
        const YAML::Node sink = sk.second;
        for (const auto& in : sink["inputs"])
            EXPECT_TRUE(untouched.count(in.as<std::string>())) << name;
        const std::string concurrency = sink["request"]["concurrency"].as<std::string>("");
        EXPECT_TRUE(concurrency == "none" || concurrency == "1") << name << ": " << concurrency;
        EXPECT_TRUE(sink["acknowledgements"]["enabled"].as<bool>(false)) << name;
        EXPECT_EQ(sink["buffer"]["when_full"].as<std::string>("block"), "block") << name;
        if (sink["type"].as<std::string>("") != "vector") {
            const std::string codec = sink["encoding"]["codec"].as<std::string>("");
            EXPECT_TRUE(codec == "text" || codec == "raw_message") << name << ": " << codec;
        }
    }
}

} // namespace
