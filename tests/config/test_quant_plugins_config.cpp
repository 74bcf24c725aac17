// plugins.quant as one plugin or a list: the default list (q8, then w4a16), a list replacing it, the single map
// form editing its first entry (as --set plugins.quant.* does), "none" turning every quant plugin off, the
// errors, and the printed config reading back the same.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "core/config/config_loader.h"
#include "core/config/engine_config.h"

namespace troupe {
namespace {

std::vector<std::string> names(const engine_config& c) {
    std::vector<std::string> out;
    for (const plugin_config& q : c.plugins.quant_plugins()) out.push_back(q.name);
    return out;
}

std::string params_of(const plugin_config& p) {
    if (!p.params.IsDefined() || p.params.IsNull()) return "{}";
    YAML::Emitter e;
    e << YAML::Flow << p.params;
    return e.c_str();
}

TEST(quant_plugins_config, the_default_is_w4a16_alone_so_q8_0_runs_on_the_builtin_int8_recipe) {
    EXPECT_EQ(names(engine_config{}), (std::vector<std::string>{"w4a16"}));
}

TEST(quant_plugins_config, each_form_gives_its_list_of_plugins) {
    struct tcase {
        std::string yaml;
        std::vector<std::string> names;
        std::vector<std::string> params;  // per plugin
    };
    const std::vector<tcase> cases{
        {"plugins: {quant: [w4a16]}", {"w4a16"}, {"{}"}},
        {"plugins: {quant: [{name: q8, params: {online: true}}, w4a16]}", {"q8", "w4a16"}, {"{online: true}", "{}"}},
        {"plugins: {quant: [w4a16, {name: q8, path: /x/libq.so}]}", {"w4a16", "q8"}, {"{}", "{}"}},
        // The single map form edits the first plugin of the (default) list and keeps the others.
        {"plugins: {quant: {params: {kernel: avx2}}}", {"w4a16"}, {"{kernel: avx2}"}},
        {"plugins: {quant: {name: q8, params: {activations: int8}}}", {"q8"}, {"{activations: int8}"}},
        {"plugins: {quant: {name: none}}", {}, {}},
    };
    for (const auto& c : cases) {
        auto cfg = parse_config(c.yaml, "c.yaml");
        ASSERT_TRUE(cfg.ok()) << c.yaml << ": " << cfg.message();
        EXPECT_EQ(names(*cfg), c.names) << c.yaml;
        const auto plugins = cfg->plugins.quant_plugins();
        for (size_t i = 0; i < plugins.size() && i < c.params.size(); ++i) {
            EXPECT_EQ(params_of(plugins[i]), c.params[i]) << c.yaml << " plugin " << i;
        }
    }
}

TEST(quant_plugins_config, set_overrides_edit_the_first_plugin) {
    engine_config c;
    const std::vector<config_override> online{{"plugins.quant.name", "q8", "--set"},
                                              {"plugins.quant.params.online", "true", "--set"}};
    ASSERT_TRUE(apply_overrides(c, online).ok());
    EXPECT_EQ(names(c), (std::vector<std::string>{"q8"}));
    EXPECT_EQ(c.plugins.quant.params["online"].as<std::string>(), "true");
    const std::vector<config_override> none{{"plugins.quant.name", "none", "--set"}};
    ASSERT_TRUE(apply_overrides(c, none).ok());
    EXPECT_TRUE(names(c).empty());
}

TEST(quant_plugins_config, bad_lists_are_errors_with_their_path) {
    struct tcase {
        std::string yaml;
        std::string message;
    };
    const std::vector<tcase> cases{
        {"plugins: {quant: []}",
         "c.yaml:1: plugins.quant: expected at least one plugin (or name: none), got an empty list"},
        {"plugins: {quant: [q8, none]}",
         "c.yaml:1: plugins.quant[1]: 'none' cannot be one of several quant plugins (write quant: {name: none})"},
        {"plugins: {quant: [q8, 'no/slash']}",
         "c.yaml:1: plugins.quant[1]: expected a plugin name (letters, digits, '_', '-'), got 'no/slash'"},
        {"plugins: {quant: [q8, {params: {a: 1}}]}", "c.yaml:1: plugins.quant[1]: expected a name (or a path)"},
        {"plugins: {quant: [{name: q8, colour: red}]}",
         "c.yaml:1: plugins.quant[0].colour: unknown key (valid: name, path, params)"},
    };
    for (const auto& c : cases) {
        auto cfg = parse_config(c.yaml, "c.yaml");
        ASSERT_FALSE(cfg.ok()) << c.yaml;
        EXPECT_EQ(cfg.message(), c.message) << c.yaml;
    }
}

TEST(quant_plugins_config, the_printed_config_reads_back_as_the_same_list) {
    for (const std::string yaml : {"plugins: {quant: [{name: q8, params: {online: true}}, w4a16]}",
                                   "plugins: {quant: [w4a16]}", "plugins: {quant: {name: none}}", ""}) {
        auto c = parse_config(yaml, "c.yaml");
        ASSERT_TRUE(c.ok()) << c.message();
        auto back = parse_config(to_yaml(*c), "printed.yaml");
        ASSERT_TRUE(back.ok()) << back.message() << "\n" << to_yaml(*c);
        EXPECT_EQ(to_yaml(*back), to_yaml(*c)) << yaml;
        EXPECT_EQ(names(*back), names(*c)) << yaml;
    }
}

}  // namespace
}  // namespace troupe
