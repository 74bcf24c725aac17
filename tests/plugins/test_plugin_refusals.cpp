// The host refuses what it cannot use, each with a clear message and no crash: a missing file, a library
// without the entry point, an ABI mismatch, the wrong kind, bad parameters, a plugin that reports an
// error at create or in an op.
#include <cstdio>
#include <cstdlib>

#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

TEST(plugin_refusals, a_missing_file_names_the_path_tried_and_the_plugin_folder) {
    plugin_host host = real_plugins();
    auto r = host.load_attention("flash");
    ASSERT_FALSE(r.ok());
    const std::string path = std::string(TROUPE_DEFAULT_PLUGIN_DIR) + "/attention/libtroupe_attention_flash.so";
    EXPECT_TRUE(r.message().starts_with("plugin attention/flash: no such file: " + path)) << r.message();
    EXPECT_TRUE(contains(r.message(), "plugins.plugin_dir or $TROUPE_PLUGIN_DIR")) << r.message();
}

TEST(plugin_refusals, a_missing_explicit_path_is_named) {
    plugin_host host = real_plugins();
    plugin_spec spec{plugin_kind::spec, "ngram", "/nonexistent/libx.so", YAML::Node()};
    auto r = host.load(spec);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "plugin spec/ngram: no such file: /nonexistent/libx.so");
}

TEST(plugin_refusals, a_library_without_the_entry_point_is_refused) {
    plugin_host host = fixture_plugins();
    auto r = host.load_attention("noentry");
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.message().starts_with("plugin attention/noentry: ")) << r.message();
    EXPECT_TRUE(contains(r.message(),
                         "libtroupe_attention_noentry.so does not export the entry point "
                         "troupe_plugin_query"))
        << r.message();
}

TEST(plugin_refusals, an_abi_mismatch_names_both_versions) {
    plugin_host host = fixture_plugins();
    auto r = host.load_attention("future");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(),
              "plugin attention/future: plugin ABI version 3 is not supported by this host (host ABI "
              "versions 1..2); rebuild the plugin against this troupe");
}

TEST(plugin_refusals, a_descriptor_without_its_op_table_is_refused) {
    plugin_host host = fixture_plugins();
    auto r = host.load_attention("incomplete");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "plugin attention/incomplete: descriptor has no attention op table");
}

TEST(plugin_refusals, a_file_that_is_no_shared_object_is_refused_with_the_loaders_reason) {
    const std::string path = ::testing::TempDir() + "libtroupe_spec_text.so";
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("not an ELF file\n", f);
    std::fclose(f);
    plugin_host host = real_plugins();
    auto r = host.load(plugin_spec{plugin_kind::spec, "text", path, YAML::Node()});
    std::remove(path.c_str());
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.message().starts_with("plugin spec/text: cannot load " + path + ": ")) << r.message();
}

TEST(plugin_refusals, a_plugin_of_another_kind_is_refused) {
    plugin_host host = real_plugins();
    plugin_spec spec{plugin_kind::spec, "", host.library_path(plugin_kind::attention, "gqa"), YAML::Node()};
    auto r = host.load(spec);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(),
              "plugin spec/libtroupe_attention_gqa: " + spec.path + " is an attention plugin, expected spec");
}

TEST(plugin_refusals, an_error_reported_by_create_reaches_the_caller_with_the_plugins_words) {
    plugin_host host = fixture_plugins();
    auto r = host.load_spec("failing", yaml("{fail_create: true}"));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "plugin spec/failing: cannot open the draft model weights (fail_create is set)");
}

TEST(plugin_refusals, an_error_reported_by_an_op_fails_that_call_only) {
    plugin_host host = fixture_plugins();
    auto proposer = host.load_spec("failing");
    ASSERT_TRUE(proposer.ok()) << proposer.message();
    const std::vector<int32_t> context = {1, 2, 3};
    auto r = propose_chain(*(*proposer), context, 4);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "plugin spec/failing: propose failed: the draft model is not loaded");
    auto again = propose_chain(*(*proposer), context, 4);
    EXPECT_FALSE(again.ok());
}

struct bad_params_case {
    plugin_kind kind;
    const char* name;
    const char* params;
    const char* message;
};

void PrintTo(const bad_params_case& c, std::ostream* os) {
    *os << plugin_kind_name(c.kind) << "/" << c.name << " " << c.params;
}

class plugin_bad_params : public ::testing::TestWithParam<bad_params_case> {};

TEST_P(plugin_bad_params, are_refused_with_the_key_and_what_would_be_right) {
    const bad_params_case& c = GetParam();
    plugin_host host = real_plugins();
    auto r = host.load(c.kind, c.name, yaml(c.params));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), c.message);
}

INSTANTIATE_TEST_SUITE_P(
    real_plugins, plugin_bad_params,
    ::testing::Values(
        bad_params_case{plugin_kind::attention, "gqa", "{kernel: cuda}",
                        "plugin attention/gqa: params.kernel: must be one of auto, scalar, avx2, avx512, got 'cuda'"},
        bad_params_case{plugin_kind::attention, "gqa", "{kernel: auto, window: 64}",
                        "plugin attention/gqa: params.window: unknown key (valid keys: kernel, numerics)"},
        bad_params_case{plugin_kind::quant, "q8", "{online: maybe}",
                        "plugin quant/q8: params.online: must be true or false, got 'maybe'"},
        bad_params_case{plugin_kind::quant, "q8", "{online: true, group: {size: 64}}",
                        "plugin quant/q8: params.group.size: unknown key (valid keys: online, activations)"},
        bad_params_case{plugin_kind::spec, "ngram", "{max_draft: 40}",
                        "plugin spec/ngram: params.max_draft: must be between 1 and 16, got 40"},
        bad_params_case{plugin_kind::spec, "ngram", "{ngram_min: 0}",
                        "plugin spec/ngram: params.ngram_min: must be between 1 and 16, got 0"}),
    [](const ::testing::TestParamInfo<bad_params_case>& info) {
        return std::string(plugin_kind_name(info.param.kind)) + "_" + info.param.name + "_" +
               std::to_string(info.index);
    });

TEST(plugin_refusals, a_name_that_could_escape_the_plugin_folder_is_refused_before_any_file_is_touched) {
    plugin_host host = real_plugins();
    auto r = host.load_spec("../../etc/x");
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.message(), "is not a plugin name (letters, digits, '_' and '-' only)")) << r.message();
}

TEST(plugin_refusals, a_plugin_that_cannot_run_on_the_backend_is_refused) {
    plugin_host host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR, plugin_backend::cuda});
    auto r = host.load_attention("gqa");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "plugin attention/gqa: cannot run on the cuda backend (its score refuses it)");
}

TEST(plugin_host_dir, the_environment_overrides_the_built_in_folder_and_options_override_both) {
    ::setenv("TROUPE_PLUGIN_DIR", "/opt/from-env", 1);
    const plugin_host from_env;
    const plugin_host from_options(plugin_host_options{"/opt/from-config"});
    ::unsetenv("TROUPE_PLUGIN_DIR");
    const plugin_host built_in;
    EXPECT_EQ(from_env.library_path(plugin_kind::spec, "ngram"), "/opt/from-env/spec/libtroupe_spec_ngram.so");
    EXPECT_EQ(from_options.plugin_dir(), "/opt/from-config");
    EXPECT_EQ(built_in.plugin_dir(), TROUPE_DEFAULT_PLUGIN_DIR);
}

TEST(plugin_host_info, a_loaded_plugin_reports_its_descriptor) {
    plugin_host host = real_plugins();
    auto p = host.load(plugin_kind::quant, "q8", yaml("{online: false}"));
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(p->info.name, "q8");
    EXPECT_EQ(p->info.version, "1.0.0");
    EXPECT_EQ(p->info.abi_version, TROUPE_PLUGIN_ABI_VERSION);
    EXPECT_EQ(p->info.path, host.library_path(plugin_kind::quant, "q8"));
    EXPECT_NE(p->quant, nullptr);
    EXPECT_EQ(p->attention, nullptr);
    EXPECT_EQ(p->spec, nullptr);
}

}  // namespace
}  // namespace troupe::testing
