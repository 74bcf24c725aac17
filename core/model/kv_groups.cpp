#include "core/model/kv_groups.h"

#include <algorithm>
#include <string>

namespace troupe {

kv_groups kv_groups::of(const llama_hparams& hp, bool release) {
    kv_groups g;
    g.group_of.assign(static_cast<size_t>(hp.n_layers), 0);
    g.slot_of.assign(static_cast<size_t>(hp.n_layers), 0);
    if (!release || !hp.any_window()) {
        g.windows = {0};
        for (int32_t i = 0; i < hp.n_layers; ++i) g.slot_of[i] = i;
        g.n_slots = hp.n_layers;
        return g;
    }
    for (int32_t i = 0; i < hp.n_layers; ++i) {
        if (std::find(g.windows.begin(), g.windows.end(), hp.window_of(i)) == g.windows.end())
            g.windows.push_back(hp.window_of(i));
    }
    std::sort(g.windows.begin(), g.windows.end());  // the global group (0) first
    std::vector<int32_t> size(g.windows.size(), 0);
    for (int32_t i = 0; i < hp.n_layers; ++i) {
        const auto at = std::find(g.windows.begin(), g.windows.end(), hp.window_of(i)) - g.windows.begin();
        g.group_of[i] = static_cast<int32_t>(at);
        g.slot_of[i] = size[at]++;
    }
    g.n_slots = *std::max_element(size.begin(), size.end());
    return g;
}

status kv_groups::check(const sequence_step& s, int32_t block_size, int32_t n_blocks) const {
    const std::string id = "sequence " + std::to_string(s.seq_id);
    if (static_cast<int32_t>(s.more_tables.size()) != n_groups() - 1) {
        std::string w;
        for (const int32_t x : windows) w += (w.empty() ? "" : ", ") + std::to_string(x);
        return make_error(id + ": " + std::to_string(s.more_tables.size() + 1) + " block tables for a model of " +
                          std::to_string(n_groups()) + " KV groups (their windows: " + w + "; 0 is global)");
    }
    const int64_t end = static_cast<int64_t>(s.pos0) + static_cast<int64_t>(s.tokens.size());
    for (int32_t g = 0; g < n_groups(); ++g) {
        const std::vector<int32_t>& t = table(s, g);
        const std::string which = n_groups() > 1 ? " of KV group " + std::to_string(g) : std::string();
        if (static_cast<int64_t>(t.size()) * block_size < end) {
            return make_error(id + ": block table" + which + " covers " + std::to_string(t.size() * block_size) +
                              " positions, the step needs " + std::to_string(end));
        }
        for (size_t i = 0; i < t.size(); ++i) {
            const int32_t b = t[i];
            if (b >= 0 && b < n_blocks) continue;
            // A released entry: the query at pos0 reads (pos0 - window, pos0], so the block must end at or before
            // pos0 - window + 1.
            const bool released = b == -1 && windows[g] > 0 &&
                                  static_cast<int64_t>(i + 1) * block_size <= int64_t{s.pos0} - windows[g] + 1;
            if (released) continue;
            if (b == -1 && windows[g] > 0) {
                return make_error(id + ": block " + std::to_string(i) + which + " was released (-1) but holds " +
                                  "positions inside the window of " + std::to_string(windows[g]) +
                                  " of its first token at " + std::to_string(s.pos0));
            }
            return make_error(id + ": block id " + std::to_string(b) + which + " outside the pool of " +
                              std::to_string(n_blocks));
        }
    }
    return {};
}

}  // namespace troupe
