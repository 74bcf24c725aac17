#include "core/backend/cuda_runner.h"

#include "core/backend/cuda_lane_stream.h"
#include "core/backend/cuda_upload.h"
#include "core/log/log.h"
#include "core/model/draft_layout.h"

namespace troupe {
namespace {

// The library, loaded only after the driver is known to be there.
result<std::shared_ptr<const cuda_library>> load_backend(const std::string& dir) {
    if (auto located = cuda_library::locate(dir); !located.ok()) return located.err();
    if (status s = cuda_library::check_driver(); !s.ok()) return s.err();
    return cuda_library::load(dir);
}

result<cuda_device> device_info(const cuda_library& lib, int32_t index) {
    troupe_cuda_device_info info{};
    info.struct_size = sizeof info;
    if (const char* e = lib.ops().device_info(index, &info)) return make_error(e);
    return cuda_device{info.index,    info.name,     info.total_bytes, info.free_bytes,
                       info.cc_major, info.cc_minor, info.n_sms};
}

std::string weight_types(const llama_weights_view& w, cuda_weight_type to) {
    const ggml_type t = w.layers.empty() ? w.output.type : w.layers[0].wq.type;
    std::string s(traits(t).name);
    if (t != ggml_type::f32 && t != ggml_type::f16 && t != ggml_type::bf16) {
        s += to == cuda_weight_type::f32 ? " (dequantized to F32)" : " (dequantized to F16)";
    }
    return s;
}

}  // namespace

result<std::vector<cuda_device>> cuda_devices(const std::string& backend_dir) {
    auto lib = load_backend(backend_dir);
    if (!lib.ok()) return lib.err();
    int32_t n = 0;
    if (const char* e = lib.value()->ops().device_count(&n)) return make_error(e);
    std::vector<cuda_device> devices;
    for (int32_t i = 0; i < n; ++i) {
        auto d = device_info(*lib.value(), i);
        if (!d.ok()) return d.err();
        devices.push_back(std::move(d.value()));
    }
    return devices;
}

result<std::unique_ptr<cuda_runner>> cuda_runner::create(const llama_weights_view& weights,
                                                         const cuda_runner_params& params) {
    if (status s = check_llama_view(weights); !s.ok()) return s.err();
    auto lib = load_backend(params.backend_dir);
    if (!lib.ok()) return lib.err();
    const troupe_cuda_ops& ops = lib.value()->ops();
    int32_t n_devices = 0;
    if (const char* e = ops.device_count(&n_devices)) return make_error(e);
    if (params.device < 0 || params.device >= n_devices) {
        return make_error("cuda device " + std::to_string(params.device) + " does not exist (" +
                          std::to_string(n_devices) + " found)");
    }
    auto dev = device_info(*lib.value(), params.device);
    if (!dev.ok()) return dev.err();

    auto upload = prepare_cuda_upload(weights, params);
    if (!upload.ok()) return upload.err();
    if (!TROUPE_CUDA_OPS_HAS(&ops, test_moe_route)) {
        // Before revision 8 the graph has no experts, and takes the description without them.
        if (upload.value()->desc.moe_layers != nullptr) {
            return make_error(weights.name +
                              ": mixture-of-experts layers need the CUDA backend's experts (ABI revision "
                              "8), and " +
                              lib.value()->path() + " is older (" + ops.build_info + "); rebuild troupe_cuda");
        }
        upload.value()->desc.struct_size = TROUPE_CUDA_MODEL_DESC_V6_SIZE;
    }
    if (!TROUPE_CUDA_OPS_HAS(&ops, model_set_taps)) {
        // Before revision 6 the graph calls neither plugins' products nor taps.
        if (!upload.value()->externals.empty() || !params.taps.empty()) {
            return make_error(weights.name + ": " +
                              (params.taps.empty() ? "weights taken by quant plugins" : "tap observers") +
                              " need the CUDA backend's plugin calls (ABI revision 6), and " + lib.value()->path() +
                              " is older (" + ops.build_info + "); rebuild troupe_cuda");
        }
        upload.value()->desc.struct_size = TROUPE_CUDA_MODEL_DESC_V4_SIZE;
    }
    if (!TROUPE_CUDA_OPS_HAS(&ops, test_softcap)) {
        // A library before revision 4 runs the llama graph only, and takes the description without its features.
        if (needs_arch_features(weights)) {
            return make_error(weights.name + ": architecture " + weights.hp.architecture +
                              " needs the CUDA backend's architecture features (ABI revision 4), and " +
                              lib.value()->path() + " is older (" + ops.build_info + "); rebuild troupe_cuda");
        }
        upload.value()->desc.struct_size = TROUPE_CUDA_MODEL_DESC_V3_SIZE;
    }

    std::unique_ptr<cuda_runner> r(new cuda_runner());
    r->lib_ = lib.value();
    r->taps_ = params.taps;
    for (const auto& sink : params.taps) {
        if (!sink) continue;
        upload.value()->desc.tap_wanted |= sink->wanted();
        if (!sink->device_data()) upload.value()->desc.tap_host |= sink->wanted();
    }
    if (upload.value()->desc.tap_wanted != 0) {
        upload.value()->desc.tap = &cuda_runner::on_tap;
        upload.value()->desc.tap_ctx = r.get();
    }
    r->device_ = dev.value();
    if (const char* e = ops.context_create(params.device, params.n_lanes, &r->ctx_)) return make_error(e);
    if (const char* e = ops.model_create(r->ctx_, &upload.value()->desc, &r->model_)) {
        return make_error(weights.name + " on cuda:" + std::to_string(params.device) + ": " + e);
    }
    r->externals_ = std::move(upload.value()->externals);  // the model calls them until it is destroyed
    troupe_cuda_model_info info{};
    info.struct_size = sizeof info;
    ops.model_info(r->model_, &info);

    const llama_view_hparams& hp = weights.hp;
    r->name_ = weights.name;
    r->architecture_ = hp.architecture;
    r->weight_types_ = weight_types(weights, params.dequantize_to);
    if (!r->externals_.empty()) {
        r->weight_types_ += ", " + std::to_string(r->externals_.size()) + " matrices in " +
                            r->externals_.front()->op->name() + "'s CUDA kernels";
    }
    r->n_layers_ = hp.n_layers;
    r->dim_ = hp.dim;
    r->n_heads_ = hp.n_heads;
    r->n_kv_heads_ = hp.n_kv_heads;
    r->n_vocab_ = hp.n_vocab;
    r->n_ctx_ = hp.n_ctx;
    r->n_lanes_ = params.n_lanes;
    r->kv_ = kv_geometry{info.block_size, info.n_blocks};
    // A layer's K and V rows, or with latent attention its one latent row (cuda_backend_abi.h revision 10).
    const size_t row_elements =
        hp.mla ? static_cast<size_t>(hp.mla->latent_width()) : static_cast<size_t>(2) * hp.n_kv_heads * hp.head_dim;
    r->kv_bytes_per_token_ = static_cast<size_t>(hp.n_layers) * row_elements * (params.kv_f16 ? 2 : 4);
    r->weight_bytes_ = info.weight_bytes;
    r->unrouted_expert_bytes_ = unrouted_expert_bytes(upload.value()->desc);
    r->host_block_bytes_ = static_cast<size_t>(info.block_size) * r->kv_bytes_per_token_;
    if (info.n_blocks <= 0 || info.kv_bytes != r->host_block_bytes_ * static_cast<uint64_t>(info.n_blocks)) {
        return make_error(r->name_ + " on cuda:" + std::to_string(params.device) + ": the backend's KV pools hold " +
                          std::to_string(info.kv_bytes) + " bytes for " + std::to_string(info.n_blocks) +
                          " blocks, expected " + std::to_string(r->host_block_bytes_) + " per block");
    }
    if (status s = r->lib_->check_swap_ops(); s.ok()) {
        r->can_swap_ = true;
    } else {
        TROUPE_LOG_WARN("cuda", "swap preemption unavailable, the scheduler will recompute instead: %s",
                        s.message().c_str());
    }
    TROUPE_LOG_INFO("cuda", "%s on cuda:%d (%s, cc %d.%d): %.1f MiB of weights, %d KV blocks of %d tokens (%.1f MiB)",
                    r->name_.c_str(), r->device_.index, r->device_.name.c_str(), r->device_.cc_major,
                    r->device_.cc_minor, static_cast<double>(info.weight_bytes) / (1 << 20), info.n_blocks,
                    info.block_size, static_cast<double>(info.kv_bytes) / (1 << 20));
    return r;
}

cuda_runner::~cuda_runner() {
    if (model_) lib_->ops().model_destroy(model_);
    if (ctx_) lib_->ops().context_destroy(ctx_);
}

std::string cuda_runner::description() const {
    return name_ + ": " + architecture_ + ", " + std::to_string(n_layers_) + " layers, dim " + std::to_string(dim_) +
           ", " + std::to_string(n_heads_) + " heads / " + std::to_string(n_kv_heads_) + " kv heads, vocab " +
           std::to_string(n_vocab_) + ", " + weight_types_ + " weights, cuda:" + std::to_string(device_.index) + " (" +
           device_.name + ")";
}

const char* cuda_runner::on_tap(void* ctx, const troupe_cuda_tap* t) {
    auto* r = static_cast<cuda_runner*>(ctx);
    const auto n = static_cast<size_t>(t->n_rows);
    r->tap_seq_ids_.resize(n);
    r->tap_positions_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const auto token = static_cast<size_t>(t->rows ? t->rows[i] : static_cast<int32_t>(i));
        r->tap_seq_ids_[i] = r->token_seq_ids_[token];
        r->tap_positions_[i] = r->flat_.positions[token];
    }
    const auto point = static_cast<tap_point>(t->tap);
    for (const auto& sink : r->taps_) {
        if (!sink || (sink->wanted() & tap_bit(point)) == 0) continue;
        tap_data d{
            point, t->layer, t->n_rows, t->width, t->host_data, r->tap_seq_ids_.data(), r->tap_positions_.data()};
        if (sink->device_data()) {
            d.data = t->device_data;
            d.stream = t->stream;
        }
        if (d.data == nullptr) {
            r->tap_error_ = std::string("tap ") + tap_name(point) + ": the backend sent no host copy";
            return r->tap_error_.c_str();
        }
        if (status s = sink->observe(d); !s.ok()) {
            r->tap_error_ = s.message();
            return r->tap_error_.c_str();
        }
    }
    return nullptr;
}

result<double> cuda_runner::measure_copy_gb_per_s(uint64_t bytes, int32_t reps) const {
    const troupe_cuda_ops& ops = lib_->ops();
    if (!TROUPE_CUDA_OPS_HAS(&ops, measure_copy))
        return make_error(lib_->path() + " has no copy probe (ABI revision 9; it is " + ops.build_info + ")");
    double gbs = 0.0;
    if (const char* e = ops.measure_copy(ctx_, bytes, reps, &gbs)) return make_error(e);
    return gbs;
}

bool cuda_runner::supports_trees() const {
    return TROUPE_CUDA_OPS_HAS(&lib_->ops(), model_copy_rows);
}

status cuda_runner::forward(const forward_batch& batch, forward_output& out) {
    cuda_batch_limits limits{n_vocab_, n_ctx_, kv_.block_size, kv_.n_blocks, {}};
    if (!supports_trees()) {
        limits.no_trees = "the CUDA backend " + lib_->path() + " has no tree attention: ABI revision 3 or later";
    }
    if (status s = flatten_batch(batch, limits, flat_); !s.ok()) return s;
    out.n_vocab = n_vocab_;
    out.row_begin = flat_.row_begin;
    out.n_rows = flat_.n_rows;
    out.logits.resize(flat_.out_tokens.size() * static_cast<size_t>(n_vocab_));
    if (flat_.tokens.empty()) return {};
    const troupe_cuda_batch b = flat_.c_batch(out.logits.data());
    if (!taps_.empty()) {
        token_seq_ids_.resize(flat_.tokens.size());
        for (size_t t = 0; t < flat_.tokens.size(); ++t) {
            token_seq_ids_[t] = batch.seqs[static_cast<size_t>(flat_.seq_of[t])].seq_id;
        }
    }
    if (!fences_ || batch.step_id < 0) {
        if (const char* e = lib_->ops().model_forward(model_, &b)) return make_error(std::string("cuda forward: ") + e);
        return {};
    }
    // The step's end, published as soon as its KV writes are enqueued: a copy of its blocks may follow it then.
    struct fence_arg {
        const cuda_runner* runner;
        int64_t step_id;
    } arg{this, batch.step_id};
    const troupe_cuda_fence_fn publish = [](void* p, troupe_cuda_event* kv_done) {
        const auto* a = static_cast<const fence_arg*>(p);
        a->runner->fences_->publish(a->step_id, std::make_shared<cuda_lane_event>(a->runner->lib_, kv_done));
    };
    if (const char* e = lib_->ops().model_forward_fenced(model_, &b, publish, &arg)) {
        const std::string why = std::string("cuda forward: ") + e;
        // Nothing of a failed step may still run when the executor publishes it as over.
        (void)lib_->ops().lane_synchronize(ctx_, 0);
        return make_error(why);
    }
    return {};
}

status cuda_runner::keep_tree_path(const sequence_step& step, std::span<const int32_t> path) {
    auto moves = tree_path_moves(step, path, "cuda keep_tree_path");
    if (!moves.ok()) return moves.err();
    if (moves->empty()) return {};
    if (!supports_trees())
        return make_error("cuda keep_tree_path: the backend " + lib_->path() + " has no model_copy_rows");
    const int32_t bs = kv_.block_size;
    std::vector<int32_t> src, dst;  // rows of the pools: block * block_size + row in block
    for (const auto& [from, to] : *moves) {
        for (const int32_t row : {from, to}) {
            const size_t entry = static_cast<size_t>(row / bs);
            if (entry >= step.block_table.size() || step.block_table[entry] < 0 ||
                step.block_table[entry] >= kv_.n_blocks) {
                return make_error("cuda keep_tree_path of sequence " + std::to_string(step.seq_id) + ": row " +
                                  std::to_string(row) + " is not in a block of the pool (table of " +
                                  std::to_string(step.block_table.size()) + " blocks)");
            }
        }
        src.push_back(step.block_table[from / bs] * bs + from % bs);
        dst.push_back(step.block_table[to / bs] * bs + to % bs);
    }
    if (const char* e = lib_->ops().model_copy_rows(model_, tree_lane(), src.data(), dst.data(),
                                                    static_cast<int32_t>(src.size()))) {
        return make_error(std::string("cuda keep_tree_path: ") + e);
    }
    return {};
}

void* cuda_runner::lane_stream(int32_t lane) const {
    return lib_->ops().context_stream(ctx_, lane);
}

std::shared_ptr<device_stream> cuda_runner::lane_stream(lane_role role) {
    const int32_t lane = role == lane_role::compute ? 0 : kv_lane();
    if (role == lane_role::kv_copy && lane == 0) return nullptr;  // one lane: the compute stream does the copies
    std::shared_ptr<device_stream>& s = streams_[role == lane_role::compute ? 0 : 1];
    if (!s) {
        s = cuda_lane_stream::create(lib_, ctx_, lane,
                                     "cuda:" + std::to_string(device_.index) + " lane " + std::to_string(lane) +
                                         (role == lane_role::compute ? " (compute)" : " (KV copies)"));
    }
    return s;
}

void cuda_runner::order_steps(std::shared_ptr<step_fences> fences) {
    if (!cuda_has_lane_events(*lib_) || n_lanes_ < 2) return;  // the backend keeps ordering its lanes itself
    if (const char* e = lib_->ops().context_set_explicit_order(ctx_, 1)) {
        TROUPE_LOG_WARN("cuda", "lanes stay ordered by the backend: %s", e);
        return;
    }
    fences_ = std::move(fences);
}

result<std::vector<std::byte>> cuda_runner::kv_bytes(std::span<const int32_t> blocks) const {
    if (status s = lib_->check_swap_ops(); !s.ok()) return s.err();
    if (const char* e = lib_->ops().context_synchronize(ctx_)) return make_error(std::string("cuda kv_bytes: ") + e);
    std::vector<std::byte> bytes(host_block_bytes_ * blocks.size());
    if (const char* e = lib_->ops().model_read_blocks(model_, kv_lane(), blocks.data(),
                                                      static_cast<int32_t>(blocks.size()), bytes.data())) {
        return make_error(std::string("cuda kv_bytes: ") + e);
    }
    return bytes;
}

status cuda_runner::copy_blocks(std::span<const int32_t> src, std::span<const int32_t> dst) {
    TROUPE_ASSERT(src.size() == dst.size(), "copy_blocks: " + std::to_string(src.size()) + " sources, " +
                                                std::to_string(dst.size()) + " destinations");
    if (src.empty()) return {};
    if (const char* e = lib_->ops().model_copy_blocks(model_, kv_lane(), src.data(), dst.data(),
                                                      static_cast<int32_t>(src.size()))) {
        return make_error(std::string("cuda copy_blocks: ") + e);
    }
    return {};
}

status cuda_runner::swap_out(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) {
    const std::string where = "cuda swap_out of sequence " + std::to_string(seq_id);
    if (status s = lib_->check_swap_ops(); !s.ok()) return make_error(where + ": " + s.message());
    if (n_tokens < 0) return make_error(where + ": " + std::to_string(n_tokens) + " tokens");
    const int32_t n_blocks = (n_tokens + kv_.block_size - 1) / kv_.block_size;
    if (blocks.size() < static_cast<size_t>(n_blocks)) {
        return make_error(where + ": " + std::to_string(n_tokens) + " tokens fill " + std::to_string(n_blocks) +
                          " blocks of " + std::to_string(kv_.block_size) + ", the table has " +
                          std::to_string(blocks.size()));
    }
    host_kv copy;
    copy.n_tokens = n_tokens;
    copy.n_blocks = n_blocks;
    copy.n_bytes = host_block_bytes_ * static_cast<size_t>(n_blocks);
    copy.bytes = std::make_unique_for_overwrite<std::byte[]>(copy.n_bytes);
    if (const char* e = lib_->ops().model_read_blocks(model_, kv_lane(), blocks.data(), n_blocks, copy.bytes.get())) {
        return make_error(where + ": " + e);
    }
    std::lock_guard lock(swap_mutex_);
    if (auto old = swapped_.find(seq_id); old != swapped_.end()) drop_host_copy(old);
    host_kv_bytes_ += copy.n_bytes;
    swapped_.emplace(seq_id, std::move(copy));
    TROUPE_LOG_DEBUG(
        "cuda", "swap_out of sequence %lld: %d tokens in %d blocks, %.2f MiB; host holds %.2f MiB for %zu sequences",
        static_cast<long long>(seq_id), n_tokens, n_blocks,
        static_cast<double>(host_block_bytes_ * n_blocks) / (1 << 20), static_cast<double>(host_kv_bytes_) / (1 << 20),
        swapped_.size());
    return {};
}

status cuda_runner::swap_in(int64_t seq_id, std::span<const int32_t> blocks, int32_t n_tokens) {
    const std::string where = "cuda swap_in of sequence " + std::to_string(seq_id);
    if (status s = lib_->check_swap_ops(); !s.ok()) return make_error(where + ": " + s.message());
    std::lock_guard lock(swap_mutex_);
    auto it = swapped_.find(seq_id);
    if (it == swapped_.end()) {
        return make_error(where + ": no copy in host memory (never swapped out, already swapped in, or forgotten)");
    }
    const host_kv& copy = it->second;
    if (n_tokens != copy.n_tokens) {
        return make_error(where + ": asked for " + std::to_string(n_tokens) + " tokens, the host copy holds " +
                          std::to_string(copy.n_tokens));
    }
    if (blocks.size() < static_cast<size_t>(copy.n_blocks)) {
        return make_error(where + ": " + std::to_string(n_tokens) + " tokens fill " + std::to_string(copy.n_blocks) +
                          " blocks of " + std::to_string(kv_.block_size) + ", the table has " +
                          std::to_string(blocks.size()));
    }
    // On failure the copy stays: the sequence is not lost until forget().
    if (const char* e =
            lib_->ops().model_write_blocks(model_, kv_lane(), blocks.data(), copy.n_blocks, copy.bytes.get())) {
        return make_error(where + ": " + e);
    }
    drop_host_copy(it);
    TROUPE_LOG_DEBUG("cuda", "swap_in of sequence %lld: %d tokens; host holds %.2f MiB for %zu sequences",
                     static_cast<long long>(seq_id), n_tokens, static_cast<double>(host_kv_bytes_) / (1 << 20),
                     swapped_.size());
    return {};
}

void cuda_runner::forget(int64_t seq_id) {
    std::lock_guard lock(swap_mutex_);
    if (auto it = swapped_.find(seq_id); it != swapped_.end()) {
        drop_host_copy(it);
        TROUPE_LOG_DEBUG("cuda", "sequence %lld ended while swapped out; host holds %.2f MiB for %zu sequences",
                         static_cast<long long>(seq_id), static_cast<double>(host_kv_bytes_) / (1 << 20),
                         swapped_.size());
    }
}

void cuda_runner::drop_host_copy(std::unordered_map<int64_t, host_kv>::iterator it) {
    TROUPE_ASSERT(host_kv_bytes_ >= it->second.n_bytes, "cuda runner: host KV byte count below a copy's size");
    host_kv_bytes_ -= it->second.n_bytes;
    swapped_.erase(it);
}

result<std::unique_ptr<model_runner>> make_cuda_runner(const llama_weights_view& weights,
                                                       const cuda_runner_params& params) {
    auto r = cuda_runner::create(weights, params);
    if (!r.ok()) return r.err();
    return std::unique_ptr<model_runner>(std::move(r.value()));
}

void log_cuda_fallback(const std::string& why) {
    TROUPE_LOG_WARN("cuda", "no GPU found (%s); falling back to the CPU", why.c_str());
}

result<std::unique_ptr<model_runner>> make_cuda_runner_or_cpu(const llama_weights_view& weights,
                                                              const cuda_runner_params& params,
                                                              const cpu_runner_factory& make_cpu_runner,
                                                              const std::function<status()>& check_on_gpu) {
    // Where a GPU is there, what must run on it is checked before the weights go up: a plugin that cannot run on
    // cuda is the answer, not a fallback (which would read "no GPU found" on a machine that has one).
    if (check_on_gpu) {
        auto devices = cuda_devices(params.backend_dir);
        if (devices.ok() && !devices.value().empty()) {
            if (status s = check_on_gpu(); !s.ok()) return s.err();
        }
    }
    // Likewise a model the CUDA graph does not implement, where a GPU is there (without one the CPU runs it).
    if (!weights.beyond_cuda_graph.empty()) {
        auto devices = cuda_devices(params.backend_dir);
        if (devices.ok() && !devices.value().empty()) {
            if (status s = check_llama_view(weights); !s.ok()) return s.err();
        }
    }
    auto gpu = make_cuda_runner(weights, params);
    if (gpu.ok()) return gpu;
    // With a GPU there, what failed is this model on it (a weight type it does not take, its memory): that is the
    // answer. Falling back would run on the CPU under a warning that says no GPU was found.
    if (auto devices = cuda_devices(params.backend_dir); devices.ok() && !devices.value().empty()) {
        const cuda_device& d = devices.value().front();
        return make_error("cuda:" + std::to_string(d.index) + " (" + d.name +
                          ") cannot run this model: " + gpu.message() + " (run it on the CPU with --device cpu)");
    }
    log_cuda_fallback(gpu.message());
    return make_cpu_runner();
}

}  // namespace troupe
