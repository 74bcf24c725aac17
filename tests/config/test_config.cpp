// Config: defaults, every error kind with its message, all errors at once, overrides, printing.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/config/config_loader.h"
#include "core/config/engine_config.h"

namespace troupe {
namespace {

const std::string default_yaml_path = std::string(TROUPE_SOURCE_DIR) + "/config/default.yaml";

std::string error_of(std::string_view yaml) {
    auto c = parse_config(yaml, "c.yaml");
    EXPECT_FALSE(c.ok()) << "expected an error for:\n" << yaml;
    return c.ok() ? std::string() : c.message();
}

std::string override_error(std::vector<config_override> overrides) {
    engine_config c;
    auto s = apply_overrides(c, overrides);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.message();
}

TEST(config, default_yaml_loads_and_equals_the_built_in_defaults) {
    auto c = load_config_file(default_yaml_path);
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(to_yaml(*c), to_yaml(engine_config{}));
    EXPECT_EQ(c->device, device_kind::cpu);
    EXPECT_EQ(c->threads, 0);
    EXPECT_FLOAT_EQ(c->sampling.temperature, 0.8f);
    EXPECT_EQ(c->sampling.top_k, 40);
    EXPECT_EQ(c->scheduler.max_batched_tokens, 2048);
    EXPECT_EQ(c->kv.memory.bytes, uint64_t{1} << 30);
    EXPECT_EQ(c->plugins.attention.name, "gqa");
    EXPECT_FALSE(c->plugins.spec.enabled());
    EXPECT_EQ(c->plugins.plugin_dir, "");  // the host resolves it: $TROUPE_PLUGIN_DIR, else the build's folder
}

TEST(config, an_empty_file_gives_the_defaults) {
    auto c = parse_config("", "empty.yaml");
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(to_yaml(*c), to_yaml(engine_config{}));
}

TEST(config, keys_present_replace_the_defaults_and_others_keep_them) {
    auto c = parse_config(R"(
model: /models/m.gguf
device: cuda
threads: 8
log_level: debug
sampling: {temperature: 0, top_k: 0, stop_strings: ["\n\n", "User:"], stop_tokens: [2, 7], ignore_eos: yes, seed: 18446744073709551615}
scheduler: {max_running_seqs: 8, max_batched_tokens: 512, policy: static, preemption: swap}
kv: {block_size: 32, memory: 0.5, prefix_caching: false}
plugins:
  spec: {name: ngram, params: {ngram_max: 3, lists: [a, b]}}
)");
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(c->model, "/models/m.gguf");
    EXPECT_EQ(c->device, device_kind::cuda);
    EXPECT_EQ(c->threads, 8);
    EXPECT_EQ(c->log_level, log_level::debug);
    EXPECT_EQ(c->sampling.temperature, 0.0f);
    EXPECT_EQ(c->sampling.top_p, 0.95f);  // kept
    EXPECT_EQ(c->sampling.stop_strings, (std::vector<std::string>{"\n\n", "User:"}));
    EXPECT_EQ(c->sampling.stop_tokens, (std::vector<int32_t>{2, 7}));
    EXPECT_TRUE(c->sampling.ignore_eos);
    EXPECT_EQ(c->sampling.seed, 18446744073709551615ull);
    EXPECT_EQ(c->scheduler.max_running_seqs, 8);
    EXPECT_EQ(c->scheduler.max_waiting, 1024);  // kept
    EXPECT_EQ(c->scheduler.policy, schedule_policy::static_batch);
    EXPECT_EQ(c->scheduler.preemption, preemption_policy::swap);
    EXPECT_FALSE(c->kv.prefix_caching);
    EXPECT_EQ(c->kv.block_size, 32);
    EXPECT_EQ(c->kv.memory.bytes, 0u);
    EXPECT_DOUBLE_EQ(c->kv.memory.fraction, 0.5);
    EXPECT_EQ(c->plugins.spec.name, "ngram");
    EXPECT_EQ(c->plugins.spec.params["ngram_max"].as<int>(), 3);
    EXPECT_EQ(params_yaml(c->plugins.spec), "{ngram_max: 3, lists: [a, b]}");
    EXPECT_EQ(params_yaml(c->plugins.quant), "{}");
}

TEST(config, each_kind_of_error_is_reported_with_its_path_line_and_what_is_valid) {
    struct tcase {
        std::string yaml;
        std::string message;
    };
    const std::vector<tcase> cases{
        {"device: gpu", "c.yaml:1: device: unknown value 'gpu' (valid: cpu, cuda)"},
        {"log_level: verbose", "c.yaml:1: log_level: unknown value 'verbose' (valid: debug, info, warn, error)"},
        {"\nscheduler:\n  max_batched_tokens: 0", "c.yaml:3: scheduler.max_batched_tokens: must be >= 1, got 0"},
        {"sampling: {top_p: 1.5}", "c.yaml:1: sampling.top_p: must be between 0 and 1, got 1.5"},
        {"sampling: {repetition_penalty: 0}", "c.yaml:1: sampling.repetition_penalty: must be > 0, got 0"},
        {"sampling: {frequency_penalty: -3}", "c.yaml:1: sampling.frequency_penalty: must be between -2 and 2, got -3"},
        {"threads: many", "c.yaml:1: threads: expected an integer, got 'many'"},
        {"threads: 2.5", "c.yaml:1: threads: expected an integer, got '2.5'"},
        {"threads: [1, 2]", "c.yaml:1: threads: expected an integer, got a list"},
        {"sampling: {seed: -1}", "c.yaml:1: sampling.seed: expected a non-negative integer, got '-1'"},
        {"sampling: {temperature: hot}", "c.yaml:1: sampling.temperature: expected a number, got 'hot'"},
        {"sampling: {ignore_eos: maybe}", "c.yaml:1: sampling.ignore_eos: expected true or false, got 'maybe'"},
        {"sampling: {stop_tokens: [1, x]}", "c.yaml:1: sampling.stop_tokens[1]: expected an integer, got 'x'"},
        {"sampling: 3", "c.yaml:1: sampling: expected a mapping, got '3'"},
        {"kv: {block_size: 12}", "c.yaml:1: kv.block_size: must be a power of two, got 12"},
        {"scheduler: {policy: fifo}", "c.yaml:1: scheduler.policy: unknown value 'fifo' (valid: continuous, static)"},
        {"scheduler: {preemption: drop}",
         "c.yaml:1: scheduler.preemption: unknown value 'drop' (valid: recompute, swap)"},
        {"kv: {prefix_caching: maybe}", "c.yaml:1: kv.prefix_caching: expected true or false, got 'maybe'"},
        {"kv: {memory: lots}", "c.yaml:1: kv.memory: expected a size like '256MiB' or '2GiB', or a fraction in (0, 1]"},
        {"kv: {memory: 1.5}", "c.yaml:1: kv.memory: a fraction must be in (0, 1], got '1.5'"},
        {"modle: x.gguf",
         "c.yaml:1: modle: unknown key (valid: model, device, threads, log_level, sampling, "
         "scheduler, kv, kernels, plugins, quantize, server)"},
        {"sampling:\n  top_q: 0.5", "c.yaml:2: sampling.top_q: unknown key (valid: temperature, top_k, top_p, min_p,"},
        {"plugins: {attention: {name: none}}", "c.yaml:1: plugins.attention.name: an attention plugin is required"},
        {"plugins: {spec: {name: ../evil}}", "c.yaml:1: plugins.spec.name: expected a plugin name"},
        {"plugins: {spec: {params: [1]}}", "c.yaml:1: plugins.spec.params: expected a mapping, got a list"},
        {"scheduler: {max_running_seqs: 100, max_batched_tokens: 50}",
         "c.yaml: scheduler.max_batched_tokens: must be >= scheduler.max_running_seqs (100), got 50"},
        {"device: [cpu", "c.yaml:1: invalid YAML"},
    };
    for (const auto& c : cases) {
        const std::string msg = error_of(c.yaml);
        EXPECT_NE(msg.find(c.message), std::string::npos)
            << "yaml: " << c.yaml << "\ngot:      " << msg << "\nexpected: " << c.message;
    }
}

TEST(config, all_errors_are_reported_together_in_one_message) {
    const std::string msg = error_of(R"(device: gpu
threads: -1
scheduler:
  max_batched_tokens: 0
  max_queue: 3
sampling:
  top_k: x
)");
    EXPECT_EQ(msg,
              "c.yaml: 5 errors:\n"
              "  c.yaml:1: device: unknown value 'gpu' (valid: cpu, cuda)\n"
              "  c.yaml:2: threads: must be between 0 and 4096, got -1\n"
              "  c.yaml:4: scheduler.max_batched_tokens: must be >= 1, got 0\n"
              "  c.yaml:5: scheduler.max_queue: unknown key (valid: max_running_seqs, max_batched_tokens, max_waiting, "
              "policy, preemption, adaptive_draft, plan_ahead)\n"
              "  c.yaml:7: sampling.top_k: expected an integer, got 'x'");
}

TEST(config, a_missing_file_is_an_error_naming_the_path) {
    auto c = load_config_file("/nonexistent/dir/c.yaml");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.message(), "/nonexistent/dir/c.yaml: cannot open the config file");
}

TEST(config, overrides_apply_key_paths_with_the_same_checks) {
    engine_config c;
    std::vector<config_override> o{
        *parse_override("sampling.temperature=0.2"),
        *parse_override("device=cuda"),
        *parse_override("sampling.stop_strings=[\"a b\", c]"),
        *parse_override("plugins.spec.name=ngram"),
        *parse_override("plugins.spec.params.ngram_max=4"),
        *parse_override("plugins.spec.params.window=16"),
        *parse_override("model=/x/y=z.gguf"),
        {"sampling.top_k", "5", "--top-k"},
    };
    auto s = apply_overrides(c, o);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(c.sampling.temperature, 0.2f);
    EXPECT_EQ(c.device, device_kind::cuda);
    EXPECT_EQ(c.sampling.stop_strings, (std::vector<std::string>{"a b", "c"}));
    EXPECT_EQ(c.plugins.spec.name, "ngram");
    EXPECT_EQ(params_yaml(c.plugins.spec), "{ngram_max: 4, window: 16}");
    EXPECT_EQ(c.model, "/x/y=z.gguf");
    EXPECT_EQ(c.sampling.top_k, 5);
}

TEST(config, override_errors_name_their_source_and_are_reported_together) {
    EXPECT_EQ(override_error({{"sampling.top_p", "2", "--top-p"}}),
              "--top-p: sampling.top_p: must be between 0 and 1, got 2");
    EXPECT_EQ(override_error({{"device", "gpu", "--set"}}), "--set: device: unknown value 'gpu' (valid: cpu, cuda)");
    const std::string msg = override_error({{"sampling.top_q", "1", "--set"}, {"threads", "x", "--threads"}});
    EXPECT_EQ(msg,
              "overrides: 2 errors:\n"
              "  --set: sampling.top_q: unknown key (valid: temperature, top_k, top_p, min_p, repetition_penalty, "
              "frequency_penalty, presence_penalty, penalty_last_n, seed, max_tokens, stop_tokens, stop_strings, "
              "ignore_eos)\n"
              "  --threads: threads: expected an integer, got 'x'");
    EXPECT_FALSE(parse_override("novalue").ok());
    EXPECT_EQ(parse_override("=3").message(), "--set: expected key.path=value, got '=3'");
    EXPECT_NE(override_error({{"sampling..top_k", "1", "--set"}}).find("not a key path"), std::string::npos);
}

TEST(config, a_failed_override_leaves_the_config_unchanged) {
    engine_config c;
    auto s = apply_overrides(c, std::vector<config_override>{{"threads", "4", "--set"}, {"device", "gpu", "--set"}});
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(c.threads, 0);
}

TEST(config, overrides_do_not_change_copies_of_the_config) {
    auto base = parse_config("plugins: {spec: {name: ngram, params: {n: 1}}}");
    ASSERT_TRUE(base.ok());
    engine_config copy = *base;
    ASSERT_TRUE(apply_overrides(copy, std::vector<config_override>{{"plugins.spec.params.n", "2", "--set"}}).ok());
    EXPECT_EQ(params_yaml(copy.plugins.spec), "{n: 2}");
    EXPECT_EQ(params_yaml(base->plugins.spec), "{n: 1}");
}

TEST(config, troupe_model_from_the_environment_names_the_model) {
    engine_config c;
    ::setenv("TROUPE_MODEL", "/env/model.gguf", 1);
    apply_environment(c);
    EXPECT_EQ(c.model, "/env/model.gguf");
    auto r = resolve_config(default_yaml_path, std::vector<config_override>{{"model", "/flag.gguf", "--model"}});
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->model, "/flag.gguf");
    auto r2 = resolve_config(default_yaml_path, {});
    EXPECT_EQ(r2->model, "/env/model.gguf");
    ::unsetenv("TROUPE_MODEL");
}

TEST(config, the_printed_config_reads_back_to_the_same_config) {
    engine_config c;
    c.model = "/path with spaces/m: 1.gguf";
    c.device = device_kind::cuda;
    c.threads = 3;
    c.log_level = log_level::warn;
    c.sampling.temperature = 0.7f;
    c.sampling.top_p = 0.9f;
    c.sampling.min_p = 0.1f;
    c.sampling.frequency_penalty = -0.3f;
    c.sampling.seed = 123456789012345ull;
    c.sampling.stop_strings = {"\n\n", "'quoted' \"too\"", "#"};
    c.sampling.stop_tokens = {2};
    c.kv.memory = memory_budget{0, 0.85};
    c.kv.prefix_caching = false;
    c.scheduler.policy = schedule_policy::static_batch;
    c.scheduler.preemption = preemption_policy::swap;
    c.plugins.spec.name = "ngram";
    c.plugins.spec.params = YAML::Load("{ngram_max: 3, nested: {a: [1, 2]}}");
    const std::string printed = to_yaml(c);
    auto back = parse_config(printed, "printed");
    ASSERT_TRUE(back.ok()) << back.message() << "\n" << printed;
    EXPECT_EQ(to_yaml(*back), printed);
    EXPECT_EQ(back->model, c.model);
    EXPECT_EQ(back->sampling.stop_strings, c.sampling.stop_strings);
    EXPECT_EQ(back->sampling.temperature, 0.7f);
    EXPECT_EQ(back->sampling.seed, c.sampling.seed);
    EXPECT_EQ(back->kv.memory, c.kv.memory);
    EXPECT_FALSE(back->kv.prefix_caching);
    EXPECT_EQ(back->scheduler.policy, schedule_policy::static_batch);
    EXPECT_EQ(back->scheduler.preemption, preemption_policy::swap);
    EXPECT_EQ(back->plugins.spec.params["nested"]["a"][1].as<int>(), 2);
    EXPECT_TRUE(validate(c).ok());
    c.sampling.top_k = -5;
    EXPECT_EQ(validate(c).message(), "config:7: sampling.top_k: must be >= 0, got -5");
}

TEST(config, memory_budgets_parse_sizes_and_fractions) {
    struct tcase {
        std::string text;
        uint64_t bytes;
        double fraction;
        std::string printed;
    };
    for (const auto& c : std::vector<tcase>{{"256MiB", 256ull << 20, 0, "256MiB"},
                                            {"1GiB", 1ull << 30, 0, "1GiB"},
                                            {"1.5GiB", 3ull << 29, 0, "1536MiB"},
                                            {"512MB", 512000000ull, 0, "500000KiB"},
                                            {"4096", 4096, 0, "4KiB"},
                                            {"1000", 1000, 0, "1000B"},
                                            {"0.9", 0, 0.9, "0.9"},
                                            {"1.0", 0, 1.0, "1.0"}}) {
        auto m = parse_memory_budget(c.text);
        ASSERT_TRUE(m.ok()) << c.text << ": " << m.message();
        EXPECT_EQ(m->bytes, c.bytes) << c.text;
        EXPECT_DOUBLE_EQ(m->fraction, c.fraction) << c.text;
        EXPECT_EQ(format_memory_budget(*m), c.printed) << c.text;
        EXPECT_EQ(*parse_memory_budget(format_memory_budget(*m)), *m) << c.text;
    }
    for (const char* bad : {"", "MiB", "-1GiB", "0", "2.0", "0.0", "1e400", "12 apples"}) {
        EXPECT_FALSE(parse_memory_budget(bad).ok()) << bad;
    }
    EXPECT_EQ((memory_budget{0, 0.5}).resolve(1000), 500u);
    EXPECT_EQ((memory_budget{64, 0}).resolve(1000), 64u);
}

TEST(config, the_server_section_reads_its_keys_and_reports_bad_values_with_their_paths) {
    auto c = parse_config(R"(
server: {host: 0.0.0.0, port: 9000, admin_token: s3cret, max_body_bytes: 4096, drain_timeout_ms: 500,
         max_prompt_tokens: 100, max_queue_requests: 2, max_queue_tokens: 300, max_send_queue_bytes: 8192,
         served_model_name: tiny}
)",
                          "c.yaml");
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(c->server.host, "0.0.0.0");
    EXPECT_EQ(c->server.port, 9000);
    EXPECT_EQ(c->server.admin_token, "s3cret");
    EXPECT_EQ(c->server.max_body_bytes, 4096);
    EXPECT_EQ(c->server.drain_timeout_ms, 500);
    EXPECT_EQ(c->server.max_prompt_tokens, 100);
    EXPECT_EQ(c->server.max_queue_requests, 2);
    EXPECT_EQ(c->server.max_queue_tokens, 300);
    EXPECT_EQ(c->server.max_send_queue_bytes, 8192);
    EXPECT_EQ(c->server.served_model_name, "tiny");
    auto back = parse_config(to_yaml(*c), "printed");
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(to_yaml(*back), to_yaml(*c));
    EXPECT_EQ(engine_config{}.server.host, "127.0.0.1");

    const std::string e = error_of("server: {port: 70000, max_body_bytes: 10, hots: x}\n");
    EXPECT_NE(e.find("server.port: must be between 0 and 65535, got 70000"), std::string::npos) << e;
    EXPECT_NE(e.find("server.max_body_bytes: must be between 1024"), std::string::npos) << e;
    EXPECT_NE(e.find("server.hots: unknown key (valid: host, port, admin_token"), std::string::npos) << e;
}

TEST(config, kernels_activations_selects_the_builtin_kernels_recipe_and_defaults_to_quantized) {
    EXPECT_EQ(engine_config{}.kernels.activations, kernel_activations::quantized);
    auto c = parse_config("kernels: {activations: float}\n", "c.yaml");
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(c->kernels.activations, kernel_activations::float32);
    EXPECT_NE(to_yaml(*c).find("kernels:\n  activations: float\n"), std::string::npos) << to_yaml(*c);
    auto back = parse_config(to_yaml(*c), "printed");
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(back->kernels.activations, kernel_activations::float32);

    engine_config o;
    const std::vector<config_override> set{{"kernels.activations", "float", "--set"}};
    ASSERT_TRUE(apply_overrides(o, set).ok());
    EXPECT_EQ(o.kernels.activations, kernel_activations::float32);

    const std::string e = error_of("kernels: {activations: int4, tile: 8}\n");
    EXPECT_NE(e.find("kernels.activations: unknown value 'int4' (valid: quantized, float)"), std::string::npos) << e;
    EXPECT_NE(e.find("kernels.tile: unknown key (valid: activations, weights)"), std::string::npos) << e;
}

TEST(config, kv_dtype_chooses_the_cache_element_type_and_defaults_to_f32) {
    EXPECT_EQ(engine_config{}.kv.dtype, kv_cache_type::f32);
    auto c = parse_config("kv: {dtype: f16}\n", "c.yaml");
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(c->kv.dtype, kv_cache_type::f16);
    auto back = parse_config(to_yaml(*c), "printed");
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(back->kv.dtype, kv_cache_type::f16);
    const std::string e = error_of("kv: {dtype: int8}\n");
    EXPECT_NE(e.find("kv.dtype: unknown value 'int8' (valid: f32, f16)"), std::string::npos) << e;
}

TEST(config, kv_plugin_names_a_kv_plugin_by_name_or_map_and_defaults_to_none) {
    EXPECT_FALSE(engine_config{}.kv.plugin.enabled());
    struct plugin_case {
        const char* yaml;
        const char* name;
        const char* params;  // the params printed back, or "" for none
    };
    for (const plugin_case& pc : {plugin_case{"kv: {plugin: int8}", "int8", ""},
                                  plugin_case{"kv: {plugin: {name: kivi, params: {value_group: 16}}}", "kivi", "16"},
                                  plugin_case{"kv: {plugin: none}", "none", ""}}) {
        SCOPED_TRACE(pc.yaml);
        auto c = parse_config(pc.yaml, "c.yaml");
        ASSERT_TRUE(c.ok()) << c.message();
        EXPECT_EQ(c->kv.plugin.name, pc.name);
        auto back = parse_config(to_yaml(*c), "printed");
        ASSERT_TRUE(back.ok()) << back.message();
        EXPECT_EQ(back->kv.plugin.name, pc.name);
        if (*pc.params) {
            EXPECT_EQ(back->kv.plugin.params["value_group"].as<std::string>(), pc.params);
        }
    }
    engine_config o;
    ASSERT_TRUE(apply_overrides(o, std::vector<config_override>{{"kv.plugin", "fp8", "--set"}}).ok());
    EXPECT_EQ(o.kv.plugin.name, "fp8");
    for (const auto& [yaml, message] : std::vector<std::pair<const char*, const char*>>{
             {"kv: {plugin: ../x}", "c.yaml:1: kv.plugin: expected a plugin name"},
             {"kv: {plugin: {params: [1]}}", "c.yaml:1: kv.plugin.params: expected a mapping, got a list"},
             {"kv: {plugin: int8, dtype: f16}",
              "kv.dtype: f16 with kv.plugin int8: the KV plugin owns the cache's format"}}) {
        const std::string e = error_of(yaml);
        EXPECT_NE(e.find(message), std::string::npos) << yaml << "\ngot: " << e;
    }
}

TEST(config, kernels_weights_chooses_copied_or_mapped_weights_and_defaults_to_copy) {
    EXPECT_EQ(engine_config{}.kernels.weights, weight_memory::copy);
    auto c = parse_config("kernels: {weights: mmap}\n", "c.yaml");
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(c->kernels.weights, weight_memory::mmap);
    auto back = parse_config(to_yaml(*c), "printed");
    ASSERT_TRUE(back.ok()) << back.message();
    EXPECT_EQ(back->kernels.weights, weight_memory::mmap);

    engine_config o;
    ASSERT_TRUE(apply_overrides(o, std::vector<config_override>{{"kernels.weights", "mmap", "--set"}}).ok());
    EXPECT_EQ(o.kernels.weights, weight_memory::mmap);

    const std::string e = error_of("kernels: {weights: disk}\n");
    EXPECT_NE(e.find("kernels.weights: unknown value 'disk' (valid: copy, mmap)"), std::string::npos) << e;
}

}  // namespace
}  // namespace troupe
