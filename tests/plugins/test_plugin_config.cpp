// YAML: the plugins section that picks plugins by kind and name, and the flattening of a plugin's
// params sub-tree into the (dotted key, value) pairs that cross the ABI.
#include "core/plugin_host/plugin_config.h"
#include "core/plugin_host/plugin_params.h"
#include "plugin_test_support.h"

namespace troupe::testing {
namespace {

TEST(plugin_config, picks_plugins_by_kind_and_name_with_their_params) {
    auto sel = parse_plugin_selection(yaml(R"(
dir: /opt/p
attention: gqa
quant: {name: q8, params: {online: true}}
spec: {name: ngram, path: /x/libtroupe_spec_ngram.so, params: {max_draft: 4}}
)"));
    ASSERT_TRUE(sel.ok()) << sel.message();
    EXPECT_EQ(sel->dir, "/opt/p");
    ASSERT_TRUE(sel->attention && sel->quant && sel->spec);
    EXPECT_EQ(sel->attention->name, "gqa");
    EXPECT_EQ(sel->attention->kind, plugin_kind::attention);
    EXPECT_EQ(sel->quant->params["online"].as<bool>(), true);
    EXPECT_EQ(sel->spec->path, "/x/libtroupe_spec_ngram.so");
    EXPECT_EQ(sel->spec->params["max_draft"].as<int>(), 4);
}

TEST(plugin_config, an_absent_section_selects_nothing) {
    auto sel = parse_plugin_selection(YAML::Node());
    ASSERT_TRUE(sel.ok());
    EXPECT_FALSE(sel->attention || sel->quant || sel->spec);
}

TEST(plugin_config, all_errors_are_reported_with_their_paths) {
    auto sel = parse_plugin_selection(yaml(R"(
attention: {nmae: gqa}
speculative: ngram
quant: {name: q8, params: 3}
)"));
    ASSERT_FALSE(sel.ok());
    EXPECT_EQ(sel.message(),
              "plugins.attention.nmae: unknown key (valid keys: name, path, params)\n"
              "plugins.attention.name: missing (e.g. name: gqa)\n"
              "plugins.speculative: unknown key (valid keys: dir, attention, quant, spec)\n"
              "plugins.quant.params: must be a map of the plugin's parameters");
}

TEST(plugin_config, a_selection_loads_through_the_host) {
    auto sel = parse_plugin_selection(yaml("{spec: {name: ngram, params: {max_draft: 2}}}"));
    ASSERT_TRUE(sel.ok()) << sel.message();
    plugin_host host = real_plugins();
    auto p = host.load(*sel->spec);
    ASSERT_TRUE(p.ok()) << p.message();
    const std::vector<int32_t> context = {3, 4, 5, 6, 3};
    auto draft = propose_chain(*p->spec, context, 8);
    ASSERT_TRUE(draft.ok()) << draft.message();
    EXPECT_EQ(*draft, (std::vector<int32_t>{4, 5}));
}

TEST(plugin_params, nested_maps_and_lists_flatten_to_dotted_keys) {
    const flat_params p = flat_params::from_yaml(yaml("{a: 1, b: {c: x, d: [5, 6]}, e: ~}"));
    const std::vector<std::pair<std::string, std::string>> expected = {
        {"a", "1"}, {"b.c", "x"}, {"b.d.0", "5"}, {"b.d.1", "6"}, {"e", ""}};
    EXPECT_EQ(p.items(), expected);
    const troupe_plugin_params v = p.view(TROUPE_BACKEND_CPU);
    ASSERT_EQ(v.n_items, 5u);
    EXPECT_STREQ(v.items[2].key, "b.d.0");
    EXPECT_STREQ(v.items[2].value, "5");
    EXPECT_EQ(YAML::Load(v.yaml)["b"]["c"].as<std::string>(), "x");
    EXPECT_EQ(v.struct_size, sizeof(troupe_plugin_params));
}

TEST(plugin_params, absent_params_give_no_pairs_and_an_empty_map) {
    const flat_params p = flat_params::from_yaml(YAML::Node());
    EXPECT_TRUE(p.items().empty());
    EXPECT_STREQ(p.view(TROUPE_BACKEND_CPU).yaml, "{}");
}

}  // namespace
}  // namespace troupe::testing
