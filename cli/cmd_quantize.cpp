// troupe quantize --model IN.gguf --method rtn|awq|gptq --type TYPE [--calib TEXT.txt] -o OUT.gguf: offline
// quantization by a quant plugin (core/quantize/*).
//
//   1. everything that can be refused is refused before any work: an unknown method (the methods found in the
//      plugin folder are listed), an unknown type, a type the model's shapes cannot take or the method cannot write
//      (the plan, core/quantize/quantize_plan.h, is printed), calibration text missing or shorter than one window
//      for a method that wants taps;
//   2. the model as float32 (dequantized where the file is quantized) runs the calibration windows with the
//      method's taps attached;
//   3. the groups are quantized in plan order, AWQ input scales folded, and the GGUF written (nothing is written
//      when any step fails).
// The method and its parameters are the config's `quantize` plugin choice (quantize.name / path / params: --method,
// --set quantize.params.KEY=VALUE or a --config file; the plugin validates its params). Progress goes to stderr.
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/log/log.h"
#include "core/model/compute_context.h"
#include "core/plugin_host/plugin_host.h"
#include "core/plugin_host/plugin_model_services.h"
#include "core/plugin_host/plugin_quantize_method.h"
#include "core/quantize/quantize_run.h"
#include "core/tokenizer/tokenizer.h"

namespace troupe::cli {
namespace {

int fail(const std::string& message, int code = exit_failure) {
    std::fprintf(stderr, "troupe quantize: %s\n", message.c_str());
    return code;
}

// The quant plugins in the plugin folder that quantize offline (have a quantize table), for the unknown-method error.
std::string methods_found(const plugin_host& host) {
    std::string names;
    const std::filesystem::path dir = std::filesystem::path(host.plugin_dir()) / "quant";
    std::error_code ec;
    std::vector<std::string> found;
    // Probing opens every quant plugin: their "loaded" lines would bury the error, so only warnings show meanwhile.
    const log_level level = current_log_level();
    if (level < log_level::warn) set_log_level(log_level::warn);
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string file = e.path().filename().string();
        const std::string pre = "libtroupe_quant_", suf = ".so";
        if (file.rfind(pre, 0) != 0 || file.size() <= pre.size() + suf.size()) continue;
        const std::string label = "quant/" + file.substr(pre.size(), file.size() - pre.size() - suf.size());
        auto lib = plugin_library::open(e.path().string(), plugin_kind::quant, label);
        if (lib.ok() && (*lib)->quantize_ops() != nullptr) found.push_back((*lib)->info().name);
    }
    set_log_level(level);
    std::sort(found.begin(), found.end());
    for (const std::string& n : found) names += (names.empty() ? "" : ", ") + n;
    return names.empty() ? "none found in " + dir.string() : names + " (in " + dir.string() + ")";
}

result<std::string> read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return make_error(path + ": cannot open the calibration text (--calib)");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

struct quantize_inputs {
    engine_config config;
    std::string type_name, calib, output, output_type;
    std::optional<int64_t> group, n_ctx, calib_tokens;
    bool calib_once = false;  // --calib-once: one calibration run on the float model instead of one per layer
};

result<quantize_inputs> parse_inputs(const cli_args& args) {
    std::vector<std::string> problems;
    quantize_inputs in;
    auto config = resolve_cli_config(args);
    if (!config) problems.push_back(config.message());
    if (config && config->model.empty()) problems.push_back("--model is required (the GGUF to quantize)");
    for (const char* flag : {"--type", "--output"}) {
        if (!args.has(flag)) problems.push_back(std::string(flag) + " is required");
    }
    in.type_name = args.value_or("--type", "");
    in.calib = args.value_or("--calib", "");
    in.output = args.value_or("--output", "");
    in.calib_once = args.has("--calib-once");
    in.output_type = args.value_or("--output-type", "");
    for (auto [flag, dst] :
         {std::pair{"--group", &in.group}, {"--ctx", &in.n_ctx}, {"--calib-tokens", &in.calib_tokens}}) {
        if (auto v = args.value(flag)) {
            auto n = parse_int_flag(flag, *v);
            if (!n)
                problems.push_back(n.message());
            else
                *dst = *n;
        }
    }
    if (!problems.empty()) return make_error(join_problems(problems));
    in.config = std::move(*config);
    if (auto m = args.value("--method")) {  // the flag names the plugin; the config's params stay
        in.config.quantize.name = *m;
        in.config.quantize.path.clear();
    }
    return in;
}

int quantize(const quantize_inputs& in) {
    using clock = std::chrono::steady_clock;
    set_log_level(in.config.log_level);
    const auto t0 = clock::now();
    auto type = parse_quantize_type(in.type_name, in.group);
    if (!type) return fail(type.message(), exit_usage);
    std::optional<ggml_type> output_type;
    if (!in.output_type.empty()) {
        auto t = parse_output_type(in.output_type);
        if (!t) return fail(t.message(), exit_usage);
        output_type = *t;
    }
    auto file = gguf::gguf_file::open(in.config.model);
    if (!file) return fail(file.message());
    auto bound = bind_llama_weights(*file);
    if (!bound) return fail(bound.message());

    // The method is made for the input model: its tensors and metadata by name (troupe_plugin_params.model).
    plugin_host host(plugin_host_options{in.config.plugins.plugin_dir, plugin_backend::cpu},
                     make_model_services(*file));
    const plugin_config& q = in.config.quantize;
    if (q.path.empty() && !std::filesystem::exists(host.library_path(plugin_kind::quant, q.name))) {
        return fail("--method " + q.name + ": unknown method (methods: " + methods_found(host) + ")", exit_usage);
    }
    auto plugin = host.load(plugin_spec{plugin_kind::quant, q.name, q.path, q.params});
    if (!plugin) return fail(plugin.message());
    auto method = plugin_quantize_method::create(plugin->instance);
    if (!method) return fail(method.message());

    const llama_hparams& hp = bound->hp;
    auto plan = make_quantize_plan(
        hp, bound->tied_output, *type, (*method)->name(),
        [&](ggml_type t, int64_t n_in) { return (*method)->can_write(t, n_in); }, output_type);
    if (!plan) return fail(in.config.model + ": " + plan.message());
    std::fprintf(stderr, "troupe quantize: %s -> %s by %s, %zu groups (%d as F16)%s:\n%s", in.config.model.c_str(),
                 in.output.c_str(), (*method)->name().c_str(), plan->groups.size(), plan->n_fallback,
                 bound->tied_output ? ", the output tied to token_embd (kept)" : "", describe(*plan).c_str());

    // Calibration inputs, checked before any work.
    std::vector<int32_t> tokens;
    calibration_options copt;
    copt.n_ctx = static_cast<int32_t>(in.n_ctx.value_or(std::min(512, hp.n_ctx)));
    copt.max_tokens = in.calib_tokens.value_or(0);
    copt.n_threads = in.config.threads;
    const bool calibrates = (*method)->wanted() != 0;
    std::shared_ptr<const tokenizer> tok;
    if (calibrates) {
        if (in.calib.empty()) {
            return fail("method " + (*method)->name() + " calibrates from activations: give --calib TEXT.txt",
                        exit_usage);
        }
        if (copt.n_ctx > hp.n_ctx) {
            return fail(
                "--ctx " + std::to_string(copt.n_ctx) + " exceeds the model's context of " + std::to_string(hp.n_ctx),
                exit_usage);
        }
        auto text = read_text(in.calib);
        if (!text) return fail(text.message());
        auto t = tokenizer::from_gguf(**file);
        if (!t) return fail(t.message());
        tok = *t;
        tokens = tok->encode(*text, /*add_bos=*/true, /*parse_special=*/false);
        copt.bos = tok->vocab().add_bos ? tok->bos_id() : -1;
        auto windows = calibration_windows(static_cast<int64_t>(tokens.size()), copt);
        if (!windows) return fail(in.calib + ": " + windows.message());
    }

    auto model = f32_model::load(*file);
    if (!model) return fail(model.message());
    std::shared_ptr<attention_op> attention;
    if (calibrates) {
        auto a = host.load(plugin_spec{plugin_kind::attention, in.config.plugins.attention.name,
                                       in.config.plugins.attention.path, in.config.plugins.attention.params});
        if (!a) return fail(a.message());
        attention = a->attention;
    }
    cpu::thread_pool pool(in.config.threads > 0
                              ? in.config.threads
                              : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency())));
    const compute_context ctx = compute_context::over(pool);
    quantize_run_options ropt;
    ropt.calibration = copt;
    ropt.sequential = !in.calib_once;
    quantize_progress progress;
    progress.window = [&](int32_t pass, int32_t n_passes, int32_t w, int32_t n) {
        std::fprintf(stderr, "troupe quantize: calibration pass %d/%d, window %d/%d (%d tokens each)\n", pass, n_passes,
                     w, n, copt.n_ctx);
    };
    progress.group = [](int32_t done, int32_t n, const planned_group& g) {
        std::fprintf(stderr, "troupe quantize: group %d/%d: %s%s -> %s\n", done, n, g.weights[0].c_str(),
                     g.weights.size() > 1 ? " ..." : "", std::string(traits(g.type).name).c_str());
    };
    auto quantized = run_quantization(*model, *plan, **method, attention, tokens, ropt, ctx.parallel_for, progress);
    if (!quantized) return fail(quantized.message());
    if (status st = write_quantized_gguf(*model, *plan, *quantized, (*method)->name(), in.output); !st) {
        return fail(st.message());
    }
    int64_t n_weights = 0;
    size_t n_bytes = 0;
    for (const planned_group& g : plan->groups) {
        for (int64_t n_out : g.n_out) {
            n_weights += n_out * g.n_in;
            n_bytes += row_bytes(g.type, g.n_in) * static_cast<size_t>(n_out);
        }
    }
    std::printf("wrote %s: %s by %s, %.3f bits per weight over the quantized linears, %llu bytes, %.2f s\n",
                in.output.c_str(), std::string(traits(*type).name).c_str(), (*method)->name().c_str(),
                8.0 * static_cast<double>(n_bytes) / static_cast<double>(n_weights),
                static_cast<unsigned long long>(std::filesystem::file_size(in.output)),
                std::chrono::duration<double>(clock::now() - t0).count());
    return exit_ok;
}

}  // namespace

const command_spec& quantize_spec() {
    static const command_spec spec = [] {
        command_spec s{
            .name = "quantize",
            .summary = "quantize a model's weights offline by a method plugin (rtn, awq, gptq)",
            .usage =
                "troupe quantize --model IN.gguf --method rtn|awq|gptq --type TYPE [--calib TEXT.txt] "
                "[--group N] [--ctx N] [--calib-tokens N] [--set quantize.params.KEY=VALUE] -o OUT.gguf",
        };
        s.flags.push_back({"--method", "", "NAME", "the quant plugin that quantizes (config quantize.name: rtn)"});
        s.flags.push_back({"--type", "", "TYPE", quantize_type_names});
        s.flags.push_back(
            {"--output-type", "", "TYPE",
             "the output matrix's type (q6_k, f16, f32 or a --type name; default as llama.cpp: Q6_K for 4-bit types "
             "where rows are multiples of 256, else Q8_0)"});
        s.flags.push_back({"--group", "", "N", "weights per scale for --type w4: 32 (q4_1), 64 or 128"});
        s.flags.push_back({"--calib", "", "FILE", "calibration text (UTF-8) for methods that calibrate"});
        s.flags.push_back({"--ctx", "", "N", "tokens per calibration window (default 512, or the model's context)"});
        s.flags.push_back({"--calib-tokens", "", "N", "use at most N tokens of the text (whole windows; default all)"});
        s.flags.push_back({"--calib-once", "", "",
                           "calibrate once on the float model (default: layer by layer, each "
                           "layer's inputs from the already quantized layers before it)"});
        s.flags.push_back({"--output", "-o", "FILE", "the GGUF to write"});
        for (auto& f : engine_flags()) s.flags.push_back(f);
        s.details =
            "The method is a quant plugin with a quantize table, found like every plugin (plugins.plugin_dir) or at "
            "quantize.path; its parameters are quantize.params (--set quantize.params.KEY=VALUE). Linears are "
            "quantized in groups sharing an input (q/k/v, "
            "gate/up, ...); AWQ input scales fold into the preceding norm or linear, so the file stays a standard "
            "GGUF. Rows that are not a whole number of the type's blocks are written as F16; token_embd keeps its "
            "type and norms stay F32.";
        return s;
    }();
    return spec;
}

int quantize_command(const cli_args& args) {
    auto in = parse_inputs(args);
    if (!in) return fail(in.message(), exit_usage);
    return quantize(*in);
}

}  // namespace troupe::cli
