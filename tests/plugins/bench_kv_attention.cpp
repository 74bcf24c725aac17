// Benchmark (not a test): one layer's decode attention for 16 sequences at one context length, through the ABI, on
// one thread: attention/gqa over F16 pools against the KV plugins (kv/int8, kv/kivi, kv/fp8) over their own blocks.
// Prints the best of 5 batches of 20 steps per cache (the thread's CPU time), and its ratio to gqa's.
//
//   build-kv/tests/plugins/bench_kv_attention [context [n_kv_heads [cache [n_heads]]]]
//     (defaults 1024, 12, every cache and 12: the 110M shape, 12 heads of head_dim 64; 4 kv heads for GQA; a cache
//     name to profile one, or none for gqa alone; 32 heads with 4 kv heads for the 1B shape)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/model/ops.h"
#include "core/plugin_host/parallel_bridge.h"
#include "core/plugin_host/plugin_host.h"

namespace troupe {
namespace {

constexpr int32_t n_seqs = 16, head_dim = 64, block_size = 16;

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// The calling thread's CPU time in ms: on a shared machine, time the thread spent descheduled does not count.
double thread_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// A cache under test: its name and one decode step.
struct bench_case {
    std::string name;
    std::function<void()> step;
    double bytes_per_token = 0;
    double best_ms = 1e30;
};

// Rounds of one batch of 10 steps per cache, the caches alternated within a round so that the machine's load moves
// them alike; the best batch of each.
void time_rounds(std::vector<bench_case>& cases) {
    for (int round = 0; round < 10; ++round) {
        for (bench_case& c : cases) {
            const double t0 = thread_ms();
            for (int i = 0; i < 10; ++i) c.step();
            c.best_ms = std::min(c.best_ms, (thread_ms() - t0) / 10);
        }
    }
}

int run(int32_t ctx, int32_t n_kv_heads, const std::string& only, int32_t n_heads) {
    plugin_host host(plugin_host_options{TROUPE_DEFAULT_PLUGIN_DIR});
    std::mt19937 rng(1);
    const int32_t blocks_per_seq = ctx / block_size + 1;
    std::vector<std::vector<int32_t>> tables(n_seqs);
    std::vector<const int32_t*> table_ptrs;
    for (int32_t s = 0; s < n_seqs; ++s) {
        for (int32_t b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
        table_ptrs.push_back(tables[s].data());
    }
    const parallel_for_fn inline_for = [](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { fn(0, n); };
    const parallel_bridge bridge(inline_for);
    std::vector<int32_t> last(n_seqs, ctx - 1), seq_of(n_seqs);
    for (int32_t s = 0; s < n_seqs; ++s) seq_of[s] = s;
    const std::vector<float> q = random_floats(static_cast<size_t>(n_seqs) * n_heads * head_dim, rng);
    const std::vector<float> k = random_floats(static_cast<size_t>(n_seqs) * n_kv_heads * head_dim, rng);
    const std::vector<float> v = random_floats(k.size(), rng);
    std::vector<float> out(q.size());
    std::vector<bench_case> cases;

    // gqa over F16 pools (their contents do not change the work).
    auto gqa = host.load_attention("gqa");
    if (!gqa.ok()) return std::fprintf(stderr, "%s\n", gqa.message().c_str()), 1;
    std::vector<uint16_t> k_pool(static_cast<size_t>(n_seqs) * blocks_per_seq * block_size * n_kv_heads * head_dim,
                                 0x3c00);
    std::vector<uint16_t> v_pool = k_pool;
    attention_call a{};
    a.n_tokens = n_seqs, a.n_heads = n_heads, a.n_kv_heads = n_kv_heads, a.head_dim = head_dim, a.scale = 0.125f;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data(), a.positions = last.data();
    a.seq_of = seq_of.data(), a.n_seqs = n_seqs, a.block_tables = table_ptrs.data(), a.block_size = block_size;
    a.k_pool = reinterpret_cast<float*>(k_pool.data()), a.v_pool = reinterpret_cast<float*>(v_pool.data());
    a.kv_type = kv_dtype::f16;
    cases.push_back({"gqa f16", [&] { (void)(*gqa)->forward(a, inline_for); }, 2.0 * 2 * n_kv_heads * head_dim});

    // Each KV plugin's pool, window and call, kept alive for the timed rounds.
    struct kv_state {
        std::shared_ptr<plugin_instance> inst;
        std::vector<uint8_t> pool, window;
        std::vector<int32_t> slots;
        troupe_kv_call call{};
    };
    std::vector<std::unique_ptr<kv_state>> states;
    for (const char* name : {"int8", "kivi", "fp8"}) {
        if (!only.empty() && only != name) continue;
        auto inst = host.load_kv(name);
        if (!inst.ok()) return std::fprintf(stderr, "%s\n", inst.message().c_str()), 1;
        auto st = std::make_unique<kv_state>();
        st->inst = *inst;
        troupe_kv_shape shape{
            sizeof(troupe_kv_shape), TROUPE_KV_SHAPE_VERSION, 1, n_kv_heads, head_dim, block_size, n_seqs,
            TROUPE_BACKEND_CPU};
        troupe_kv_layout layout{};
        layout.struct_size = sizeof layout;
        st->inst->kv_ops()->layout(st->inst->handle(), &shape, &layout);
        const size_t block_bytes = (block_size * layout.bytes_per_token + layout.bytes_per_block + 63) / 64 * 64;
        st->pool.resize(block_bytes * n_seqs * blocks_per_seq);
        st->window.resize(static_cast<size_t>(layout.window_tokens) * layout.window_bytes_per_token * n_seqs);
        st->slots = seq_of;
        troupe_kv_call& c = st->call;
        c.struct_size = sizeof c, c.version = TROUPE_KV_CALL_VERSION, c.n_heads = n_heads, c.n_kv_heads = n_kv_heads;
        c.head_dim = head_dim, c.scale = 0.125f, c.n_seqs = n_seqs, c.block_tables = table_ptrs.data();
        c.block_size = block_size, c.pool = st->pool.data(), c.block_bytes = block_bytes;
        c.window = st->window.data(), c.window_slot = st->slots.data();
        // Positions 0..ctx-2 written by prefill chunks of 256, then the timed step at ctx-1 (rewritten each time).
        for (int32_t p0 = 0; p0 < ctx - 1; p0 += 256) {
            const int32_t n = std::min(256, ctx - 1 - p0);
            std::vector<int32_t> pos, seq;
            for (int32_t s = 0; s < n_seqs; ++s) {
                for (int32_t i = 0; i < n; ++i) pos.push_back(p0 + i), seq.push_back(s);
            }
            const auto qq = random_floats(pos.size() * n_heads * head_dim, rng);
            const auto kk = random_floats(pos.size() * n_kv_heads * head_dim, rng);
            const auto vv = random_floats(kk.size(), rng);
            std::vector<float> oo(qq.size());
            c.n_tokens = static_cast<int32_t>(pos.size()), c.q = qq.data(), c.k = kk.data(), c.v = vv.data();
            c.out = oo.data(), c.positions = pos.data(), c.seq_of = seq.data();
            st->inst->kv_ops()->forward(st->inst->handle(), &c, bridge.c());
        }
        c.n_tokens = n_seqs, c.q = q.data(), c.k = k.data(), c.v = v.data(), c.out = out.data();
        c.positions = last.data(), c.seq_of = seq_of.data();
        kv_state* raw = st.get();
        cases.push_back({std::string("kv/") + name,
                         [raw, &bridge] { raw->inst->kv_ops()->forward(raw->inst->handle(), &raw->call, bridge.c()); },
                         static_cast<double>(block_bytes) / block_size});
        states.push_back(std::move(st));
    }

    time_rounds(cases);
    std::printf(
        "context %d, %d sequences, %d heads, %d kv heads, head_dim %d, one thread: ms per layer decode step "
        "(best of 10 alternated batches, thread CPU time)\n",
        ctx, n_seqs, n_heads, n_kv_heads, head_dim);
    const double base = cases[0].best_ms;
    for (const bench_case& c : cases) {
        std::printf("  %-12s %8.3f  (%.2fx gqa f16; %.0f bytes per token per layer)\n", c.name.c_str(), c.best_ms,
                    c.best_ms / base, c.bytes_per_token);
    }
    return 0;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    return troupe::run(argc > 1 ? std::atoi(argv[1]) : 1024, argc > 2 ? std::atoi(argv[2]) : 12,
                       argc > 3 ? argv[3] : "", argc > 4 ? std::atoi(argv[4]) : 12);
}
