// Not a test: response_format's figures (issue 11.5).
//   1. validity: --runs constrained generations (temperature 1, no truncation, seeds 1..runs) of a schema with a
//      string, an integer, an enum, an array and an optional boolean on --model (stories260K by default); each
//      output must end with end-of-generation and parse and match the schema (boost::json and a checker here,
//      then /usr/bin/python3's json and, where Debian's python3-jsonschema is installed, jsonschema).
//   2. cost: on --cost-model (the 110M shape: `troupe synth --shape 110M --vocab
//      ../shared/vocab/ggml-vocab-llama-spm.gguf --type q8_0 -o 110M.gguf`), batch-1 decode steps of --cost-runs
//      constrained generations; per step, the mask's cost (looking the mask up, computing it on a cache miss,
//      applying it, advancing the grammar, each timed on its own) beside the step (forward and constrained
//      sampling), first run (cold cache) and the rest (warm) apart.
//   bench_json_schema [--model M] [--runs 100] [--cost-model 110M.gguf] [--cost-runs 8] [--threads T] [--out DIR]
// --out: where the schema and the outputs go for the Python check (default: a folder in the system's temp
// directory, so a run from the source tree leaves nothing in it).
#include <boost/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/config/engine_config.h"
#include "core/loader/model_loader.h"
#include "core/log/log.h"
#include "core/sampling/grammar/json_schema_grammar.h"
#include "core/sampling/grammar/token_constraint.h"
#include "core/sampling/sampler.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/common/shared_data.h"

namespace troupe {
namespace {
namespace json = boost::json;
using clock_type = std::chrono::steady_clock;

constexpr const char* schema_text = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 16},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", "sleepy"]},
    "friends": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    "pet": {"type": "boolean"}
  },
  "required": ["name", "age", "mood", "friends"],
  "additionalProperties": false
})";

double seconds(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

size_t utf8_chars(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// The schema above, checked by hand: the keys, their types, the enum, the lengths.
std::string check(const json::value& v) {
    if (!v.is_object()) return "not an object";
    const json::object& o = v.get_object();
    for (const auto& kv : o) {
        if (kv.key() != "name" && kv.key() != "age" && kv.key() != "mood" && kv.key() != "friends" &&
            kv.key() != "pet") {
            return "unexpected key " + std::string(kv.key());
        }
    }
    for (const char* k : {"name", "age", "mood", "friends"}) {
        if (!o.contains(k)) return std::string("missing ") + k;
    }
    if (!o.at("name").is_string() || utf8_chars(o.at("name").get_string()) > 16) return "bad name";
    if (!o.at("age").is_int64() && !o.at("age").is_uint64()) return "bad age";
    const json::value& mood = o.at("mood");
    if (!(mood == "happy" || mood == "sad" || mood == "sleepy")) return "bad mood";
    if (!o.at("friends").is_array() || o.at("friends").get_array().size() > 3) return "bad friends";
    for (const auto& f : o.at("friends").get_array()) {
        if (!f.is_string() || utf8_chars(f.get_string()) > 12) return "bad friend";
    }
    if (o.contains("pet") && !o.at("pet").is_bool()) return "bad pet";
    return {};
}

struct run_result {
    std::string text;
    bool ended = false;  // end-of-generation sampled
    int32_t n_steps = 0;
    double forward_s = 0;
    double sample_s = 0;  // sampling (with the mask applied and the grammar advanced inside)
    double mask_s = 0;    // the mask's lookup (or computation), application and the grammar's advance
};

// One generation at batch 1: prefill, then decode until end-of-generation or max_tokens.
result<run_result> generate(model_runner& runner, const tokenizer& tok,
                            const std::shared_ptr<const grammar::token_constraint>& c,
                            const std::vector<int32_t>& prompt, uint64_t seed, int32_t max_tokens) {
    sampling_params p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    p.constraint = c;
    sampler constrained(p);
    std::vector<float> scratch;  // [n_vocab]
    const kv_geometry kv = runner.kv();
    const int32_t n_ctx = static_cast<int32_t>(prompt.size()) + max_tokens + 1;
    std::vector<int32_t> table((n_ctx + kv.block_size - 1) / kv.block_size);
    for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
    run_result r;
    forward_output out;
    std::vector<int32_t> inputs = prompt;
    int32_t pos = 0;
    for (int32_t step = 0; step < max_tokens; ++step) {
        forward_batch batch;
        batch.seqs.push_back(sequence_step{1, inputs, pos, table, false});
        const auto t0 = clock_type::now();
        if (status st = runner.forward(batch, out); !st) return make_error(st.message());
        // The mask's parts, timed on their own: the lookup (a computation on a miss), applying it to the
        // row, and advancing the grammar by the sampled token (sample() does the last two again inside).
        const auto t1 = clock_type::now();
        const grammar::grammar_state* states[] = {&constrained.constraint_state()};
        auto mask = c->masks_for(states)[0];
        scratch.assign(out.row(0).begin(), out.row(0).end());
        mask->apply(scratch);
        const auto t3 = clock_type::now();
        const grammar::grammar_state before = constrained.constraint_state();
        constrained.set_next_mask(std::move(mask));
        const int32_t t = constrained.sample(out.row(0), {});
        const auto t4 = clock_type::now();
        (void)c->after(before, t);
        const auto t5 = clock_type::now();
        if (step > 0) {  // decode steps only (the first forward is the prefill)
            r.forward_s += seconds(t0, t1);
            r.sample_s += seconds(t3, t4);
            r.mask_s += seconds(t1, t3) + seconds(t4, t5);
            ++r.n_steps;
        }
        pos += static_cast<int32_t>(inputs.size());
        if (tok.is_eog(t)) {
            r.ended = true;
            break;
        }
        r.text += tok.output_piece(t, false);
        inputs.assign(1, t);
    }
    return r;
}

result<loaded_model> load(const std::string& path, int32_t threads) {
    engine_config config;
    config.model = path;
    config.threads = threads;
    return load_model(config);
}

int validity(const std::string& model_path, int32_t runs, int32_t threads, const std::string& out_dir) {
    auto m = load(model_path, threads);
    if (!m) {
        std::fprintf(stderr, "bench_json_schema: %s\n", m.message().c_str());
        return 1;
    }
    const tokenizer& tok = *m->tok;
    std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
    for (int32_t id = 0; id < tok.n_vocab(); ++id) pieces[static_cast<size_t>(id)] = tok.output_piece(id, false);
    auto vocab = std::make_shared<const grammar::vocab_index>(std::move(pieces), tok.eog_ids());
    auto g = grammar::json_schema_grammar(json::parse(schema_text));
    if (!g) {
        std::fprintf(stderr, "bench_json_schema: %s\n", g.message().c_str());
        return 1;
    }
    auto c = std::make_shared<const grammar::token_constraint>(std::move(*g), vocab);
    const std::vector<int32_t> prompt = tok.encode("Lily and Tom went to the park. ", true);
    const std::string outputs_path = out_dir + "/json_schema_outputs.jsonl";
    const std::string schema_path = out_dir + "/json_schema.json";
    std::ofstream(schema_path) << schema_text;
    std::ofstream outputs(outputs_path);
    int32_t n_valid = 0, n_ended = 0;
    int64_t n_tokens = 0;
    std::string first_failure;
    for (int32_t run = 1; run <= runs; ++run) {
        auto r = generate(*m->runner, tok, c, prompt, static_cast<uint64_t>(run), 512);
        if (!r) {
            std::fprintf(stderr, "bench_json_schema: %s\n", r.message().c_str());
            return 1;
        }
        n_tokens += r->n_steps + 1;
        n_ended += r->ended;
        boost::system::error_code ec;
        const json::value v = json::parse(r->text, ec);
        const std::string why = ec ? "does not parse: " + ec.message() : check(v);
        if (r->ended && why.empty()) {
            ++n_valid;
        } else if (first_failure.empty()) {
            first_failure = "seed " + std::to_string(run) + (r->ended ? "" : " (no end)") + ": " + why + ": " + r->text;
        }
        outputs << json::serialize(json::value(r->text)) << "\n";
        if (run <= 3) std::printf("   seed %d: %s\n", run, r->text.c_str());
    }
    outputs.close();
    std::printf(
        "   %d / %d runs ended at the JSON's end; %d / %d valid (boost::json + this checker); %.0f tokens each\n",
        n_ended, runs, n_valid, runs, static_cast<double>(n_tokens) / runs);
    if (!first_failure.empty()) std::printf("   first failure: %s\n", first_failure.c_str());
    const grammar::constraint_stats s = c->stats();
    std::printf("   mask cache: %lld lookups, %lld computed (%.1f ms each on this %d-token vocabulary)\n",
                static_cast<long long>(s.n_lookups), static_cast<long long>(s.n_computed),
                s.n_computed ? 1e3 * s.compute_s / static_cast<double>(s.n_computed) : 0.0, tok.n_vocab());
    const std::string py = std::string("/usr/bin/python3 ") + TROUPE_SOURCE_DIR +
                           "/tests/sampling/validate_json_outputs.py " + schema_path + " " + outputs_path;
    std::fflush(stdout);
    const int rc = std::system(py.c_str());
    return n_valid == runs && rc == 0 ? 0 : 1;
}

int cost(const std::string& model_path, int32_t runs, int32_t threads) {
    auto m = load(model_path, threads);
    if (!m) {
        std::fprintf(stderr, "bench_json_schema: %s\n", m.message().c_str());
        return 1;
    }
    const tokenizer& tok = *m->tok;
    std::printf("   %s\n", m->runner->description().c_str());
    const auto t_index = clock_type::now();
    std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
    for (int32_t id = 0; id < tok.n_vocab(); ++id) pieces[static_cast<size_t>(id)] = tok.output_piece(id, false);
    auto vocab = std::make_shared<const grammar::vocab_index>(std::move(pieces), tok.eog_ids());
    auto c = std::make_shared<const grammar::token_constraint>(
        std::move(*grammar::json_schema_grammar(json::parse(schema_text))), vocab);
    std::printf("   vocabulary index: %d tokens, a trie of %zu nodes, in %.1f ms (once per model)\n", tok.n_vocab(),
                vocab->trie().size(), 1e3 * seconds(t_index, clock_type::now()));
    const std::vector<int32_t> prompt = tok.encode("Lily and Tom went to the park. ", true);
    run_result cold, warm;
    int32_t n_warm_runs = 0;
    for (int32_t run = 1; run <= runs; ++run) {
        const grammar::constraint_stats before = c->stats();
        auto r = generate(*m->runner, tok, c, prompt, static_cast<uint64_t>(run), 160);
        if (!r) {
            std::fprintf(stderr, "bench_json_schema: %s\n", r.message().c_str());
            return 1;
        }
        const grammar::constraint_stats after = c->stats();
        std::printf("   run %d: %d decode steps, %lld masks computed, %s\n", run, r->n_steps,
                    static_cast<long long>(after.n_computed - before.n_computed), r->ended ? "ended" : "max_tokens");
        run_result& into = run == 1 ? cold : warm;
        n_warm_runs += run > 1;
        into.n_steps += r->n_steps;
        into.forward_s += r->forward_s;
        into.sample_s += r->sample_s;
        into.mask_s += r->mask_s;
    }
    auto line = [](const char* what, const run_result& r) {
        if (r.n_steps == 0) return;
        const double step = (r.forward_s + r.sample_s) / r.n_steps;
        const double mask = r.mask_s / r.n_steps;
        std::printf("   %s: %d steps, step %.2f ms (forward %.2f, sampling %.3f), mask %.3f ms = %.2f%% of the step\n",
                    what, r.n_steps, 1e3 * step, 1e3 * r.forward_s / r.n_steps, 1e3 * r.sample_s / r.n_steps,
                    1e3 * mask, 100 * mask / step);
    };
    line("first run (cold mask cache)", cold);
    line("later runs (warm cache)", warm);
    run_result all = cold;
    all.n_steps += warm.n_steps;
    all.forward_s += warm.forward_s;
    all.sample_s += warm.sample_s;
    all.mask_s += warm.mask_s;
    line("all runs", all);
    const int n_again = 20;
    grammar::grammar_state in_name = c->start();
    for (int32_t t : tok.encode("{\"name\": \"Li", false)) in_name = c->after(in_name, t);
    (void)c->compute(in_name);
    const auto t_again = clock_type::now();
    int32_t n_allowed = 0;
    for (int k = 0; k < n_again; ++k) n_allowed = c->compute(in_name).count();
    std::printf("   the mask inside a string (%d tokens allowed), its states already in the DFA: %.3f ms\n", n_allowed,
                1e3 * seconds(t_again, clock_type::now()) / n_again);
    const grammar::constraint_stats s = c->stats();
    std::printf("   masks computed: %lld of %lld lookups, %.2f ms each (a walk of the %d-token vocabulary's trie)\n",
                static_cast<long long>(s.n_computed), static_cast<long long>(s.n_lookups),
                s.n_computed ? 1e3 * s.compute_s / static_cast<double>(s.n_computed) : 0.0, tok.n_vocab());
    const double share = all.n_steps ? all.mask_s / (all.forward_s + all.sample_s) : 0;
    std::printf("   goal: the mask under 5%% of the decode step over these runs: %s (%.2f%%)\n",
                share < 0.05 ? "met" : "NOT met", 100 * share);
    (void)n_warm_runs;
    return 0;
}

int main_impl(int argc, char** argv) {
    std::string model = testing::shared_file("models/stories260K.gguf").value_or("");
    std::string cost_model;
    std::string out_dir = (std::filesystem::temp_directory_path() / "troupe_bench_json_schema").string();
    int32_t runs = 100, cost_runs = 8, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
        if (!std::strcmp(argv[i], "--cost-model")) cost_model = argv[i + 1];
        if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--cost-runs")) cost_runs = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--out")) out_dir = argv[i + 1];
    }
    set_log_level(log_level::warn);
    if (model.empty()) {
        std::fprintf(stderr, "bench_json_schema: no --model and no ../shared/models/stories260K.gguf\n");
        return 1;
    }
    std::printf("== 1. validity: %d runs at temperature 1 (no truncation) on %s, schema:\n%s\n", runs, model.c_str(),
                schema_text);
    std::error_code made;
    std::filesystem::create_directories(out_dir, made);
    int rc = validity(model, runs, threads, out_dir);
    if (cost_model.empty()) {
        std::printf(
            "== 2. cost: skipped (--cost-model 110M.gguf: `troupe synth --shape 110M --vocab "
            "../shared/vocab/ggml-vocab-llama-spm.gguf --type q8_0 -o 110M.gguf`)\n");
        return rc;
    }
    std::printf("== 2. cost per decode step at batch 1 on %s, %d runs\n", cost_model.c_str(), cost_runs);
    rc |= cost(cost_model, cost_runs, threads);
    return rc;
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) {
    return troupe::main_impl(argc, argv);
}
