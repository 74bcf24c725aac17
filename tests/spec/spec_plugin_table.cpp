#include "tests/spec/spec_plugin_table.h"

#include <cstdlib>
#include <filesystem>

namespace troupe::testing {

namespace {

namespace fs = std::filesystem;

spec_params fixed(std::string yaml) {
    return spec_params{true, std::move(yaml), {}};
}

// spec/draft: the target's Q8_0 sibling drafts for it (stories260K-Q8_0 for the stories, rand10M-Q8_0 for rand10M);
// llama-2-tiny-random drafts for itself (the one model with its exact vocabulary).
spec_params draft_params(const std::string& model_path) {
    const fs::path target(model_path);
    const std::string name = target.filename().string();
    std::string drafter = name;
    if (name.rfind("stories260K", 0) == 0) drafter = "stories260K-Q8_0.gguf";
    if (name.rfind("rand10M", 0) == 0) drafter = "rand10M-Q8_0.gguf";
    const fs::path path = target.parent_path() / drafter;
    if (!fs::exists(path)) return spec_params{false, {}, "no drafter " + path.string()};
    return fixed("{model: \"" + path.string() + "\"}");
}

// spec/medusa and spec/eagle: heads distilled for this target, $TROUPE_SPEC_HEADS_DIR/<model stem>.<kind>.gguf, or
// those of its family's float model (stories260K.<kind>.gguf for stories260K-Q8_0: quantized copies have the same
// fingerprint), named by the plugin's params.<key>.
spec_params heads_params(const std::string& model_path, const std::string& kind, const std::string& key) {
    const std::string stem = fs::path(model_path).stem().string();
    const char* dir = std::getenv("TROUPE_SPEC_HEADS_DIR");
    const std::string file = stem + "." + kind + ".gguf";
    const std::string how = "make one with `troupe distill --target " + model_path + " --kind " + kind +
                            " --data ../shared/text/stories.txt -o DIR/" + file + "` and set TROUPE_SPEC_HEADS_DIR=DIR";
    if (dir == nullptr) {
        return spec_params{false, {}, "TROUPE_SPEC_HEADS_DIR is not set: no " + file + " (" + how + ")"};
    }
    const fs::path own = fs::path(dir) / file;
    const fs::path family = fs::path(dir) / (stem.substr(0, stem.find('-')) + "." + kind + ".gguf");
    for (const fs::path& path : {own, family}) {
        if (fs::exists(path)) return fixed("{" + key + ": \"" + path.string() + "\"}");
    }
    return spec_params{false, {}, "no " + own.string() + " (" + how + ")"};
}

}  // namespace

const std::vector<spec_plugin_row>& spec_plugin_rows() {
    static const std::vector<spec_plugin_row> rows = {
        {"ngram", "ngram", [](const std::string&) { return fixed("{}"); }, true, 4},
        {"ngram_tree", "ngram", [](const std::string&) { return fixed("{max_draft: 2, branches: 3}"); }},
        // The paper's tree (29 nodes, greedy only for time) and the plugin's defaults (the pool alone, no window).
        {"lookahead", "lookahead",
         [](const std::string&) { return fixed("{lookahead: true, window: 5, ngram: 4, guesses: 5}"); }, false},
        {"lookahead_pool", "lookahead", [](const std::string&) { return fixed("{}"); }},
        // Up to 2 guesses of 2 tokens and a window of 3 nodes: the whole tree fits the sampling test's steps.
        {"lookahead_small", "lookahead",
         [](const std::string&) { return fixed("{lookahead: true, window: 2, ngram: 3, guesses: 2}"); }},
        {"draft", "draft", draft_params, true, 4},
        {"medusa", "medusa", [](const std::string& m) { return heads_params(m, "medusa", "heads"); }, true, 6},
        {"eagle", "eagle", [](const std::string& m) { return heads_params(m, "eagle", "layer"); }, true, 6},
    };
    return rows;
}

bool spec_plugin_built(const std::string& name, std::string& path) {
    path = std::string(TROUPE_DEFAULT_PLUGIN_DIR) + "/spec/libtroupe_spec_" + name + ".so";
    return fs::exists(path);
}

}  // namespace troupe::testing
