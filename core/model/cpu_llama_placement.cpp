// cpu_llama's weight placement: which products run fused (q/k/v, gate/up) and where the builtin kernels' weights
// live when they are copied (kernels.weights: copy): one region per thread, each thread's shard of every matrix back
// to back in step order.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log/log.h"
#include "core/model/cpu_llama.h"
#include "kernels/cpu/weight_panels.h"

namespace troupe {

void cpu_llama::fuse_projections() {
    n_fused_groups_ = 0;
    for (layer& l : layers_) {
        const linear* qkv[] = {&l.wq, &l.wk, &l.wv};
        const linear* gate_up[] = {&l.w_gate, &l.w_up};
        if (!l.mla) l.w_qkv = linear::concatenated(qkv);          // MLA layers have no q, k, v
        if (!l.moe) l.w_gate_up = linear::concatenated(gate_up);  // MoE layers fuse each expert's (moe_ffn)
        n_fused_groups_ += (l.w_qkv ? 1 : 0) + (l.w_gate_up ? 1 : 0);
    }
    TROUPE_LOG_DEBUG("model", "%d of %zu q/k/v and gate/up groups run as one matrix in steps of <= %zu tokens",
                     n_fused_groups_, 2 * layers_.size(), k_max_fused_tokens);
}

namespace {

// Shard bounds of a weight's rows over n_shards threads, at multiples of its placement_rows (for the builtin kernels
// weight_panel_rows: a shard starts a panel; a plugin's weight: the plugin's multiple).
std::vector<int64_t> shard_bounds(const linear& m, int n_shards) {
    const int64_t n = m.n_out(), rows = std::max<int64_t>(1, m.placement_rows());
    std::vector<int64_t> b(n_shards + 1);
    for (int s = 0; s < n_shards; ++s) b[s] = n * s / n_shards / rows * rows;
    b[n_shards] = n;
    return b;
}

}  // namespace

// The weights are laid out for decode, which streams every one of them once per step, each thread its share of
// every matrix: thread t's shards of all the matrices lie back to back in region t, in the order a step multiplies
// them, so each thread reads one continuous stream through the whole step (parallel_ranges gives thread t share t).
// Streams that jump from matrix to matrix (every thread's share next to the others') measured ~10% slower on two
// Zen 5 cores at ~90 GB/s (88.5% vs 97.1% of a plain read) — memory's prefetchers restart at every jump.
status cpu_llama::place_weights() {
    // What each step multiplies, in order: fused groups as one matrix (their parts become views of it).
    std::vector<linear*> order;
    for (layer& l : layers_) {
        if (l.mla) {
            const std::vector<linear*> mla = l.mla->weights_in_step_order();
            order.insert(order.end(), mla.begin(), mla.end());
        } else if (l.w_qkv) {
            order.push_back(&*l.w_qkv);
        } else {
            order.insert(order.end(), {&l.wq, &l.wk, &l.wv});
        }
        order.push_back(&l.wo);
        if (l.moe) {
            const std::vector<linear*> moe = l.moe->weights_in_step_order();
            order.insert(order.end(), moe.begin(), moe.end());
        } else if (l.w_gate_up) {
            order.push_back(&*l.w_gate_up);
            order.push_back(&l.w_down);
        } else {
            order.insert(order.end(), {&l.w_gate, &l.w_up, &l.w_down});
        }
    }
    order.push_back(&output_);
    const int n_shards = pool_->n_threads();
    std::vector<size_t> region_bytes(n_shards, 0);
    for (const linear* m : order) {
        if (m->placement_rows() == 0) continue;  // a plugin that keeps its own memory
        const std::vector<int64_t> b = shard_bounds(*m, n_shards);
        for (int s = 0; s < n_shards; ++s) region_bytes[s] += m->placed_bytes(b[s], b[s + 1]);
    }
    constexpr size_t k_region_align = size_t{2} << 20;  // a huge page
    std::vector<size_t> region_at(n_shards, 0);
    size_t total = 0;
    for (int s = 0; s < n_shards; ++s) {
        region_at[s] = total;
        total += (region_bytes[s] + k_region_align - 1) / k_region_align * k_region_align;
    }
    if (std::all_of(region_bytes.begin(), region_bytes.end(), [](size_t b) { return b == 0; })) {
        return {};  // every weight belongs to plugins that keep their own memory
    }
    if (!arena_.allocate(total)) {
        return make_error(w_.file->path() + ": cannot allocate " + std::to_string(total >> 20) +
                          " MiB for a copy of the weights (kernels.weights: copy; 'mmap' reads them in place): " +
                          std::strerror(errno));
    }
    std::vector<uint8_t*> cursor(n_shards);
    for (int s = 0; s < n_shards; ++s) cursor[s] = arena_.data() + region_at[s];
    int n_packed = 0, n_placed = 0, n_by_plugins = 0;
    for (linear* m : order) {
        if (m->placement_rows() == 0) continue;
        const std::vector<int64_t> b = shard_bounds(*m, n_shards);
        std::vector<size_t> n_bytes(n_shards);  // before place: a plugin's weight counts no bytes once placed
        for (int s = 0; s < n_shards; ++s) n_bytes[s] = m->placed_bytes(b[s], b[s + 1]);
        if (status st = m->place(b, cursor, pool_.get()); !st.ok()) {
            return make_error(w_.file->path() + ": placing a weight of " + std::to_string(m->n_out()) + " rows in " +
                              std::to_string(n_shards) +
                              " per-thread regions (kernels.weights: copy): " + st.message());
        }
        for (int s = 0; s < n_shards; ++s) cursor[s] += n_bytes[s];
        n_packed += m->packed() ? 1 : 0;
        n_by_plugins += m->by_plugin() ? 1 : 0;
        ++n_placed;
    }
    const llama_hparams& hp = w_.hp;
    for (layer& l : layers_) {  // the fused groups' parts now read the group's placed rows
        if (l.w_qkv) {
            l.wq = l.w_qkv->rows(0, hp.q_width());
            l.wk = l.w_qkv->rows(hp.q_width(), hp.q_width() + hp.kv_width());
            l.wv = l.w_qkv->rows(hp.q_width() + hp.kv_width(), hp.q_width() + 2 * hp.kv_width());
        }
        if (l.w_gate_up) {
            l.w_gate = l.w_gate_up->rows(0, hp.ffn_dim);
            l.w_up = l.w_gate_up->rows(hp.ffn_dim, 2 * hp.ffn_dim);
        }
        if (l.moe) l.moe->parts_from_groups();
    }
    TROUPE_LOG_INFO("model",
                    "weights: %.1f MiB copied into anonymous memory%s, one region per thread (%d), %d of %d matrices "
                    "repacked into panels, %d prepared by plugins (kernels.weights: copy)",
                    static_cast<double>(total) / (1 << 20), arena_.huge_pages() ? " advised for huge pages" : "",
                    n_shards, n_packed, n_placed, n_by_plugins);
    return {};
}

}  // namespace troupe
