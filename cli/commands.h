// The subcommands of `troupe`: each has a spec (flags, usage, help) and a handler returning the exit code.
// One file per command (cmd_<name>.cpp); main.cpp dispatches.
#pragma once

#include "cli/cli_args.h"

namespace troupe::cli {

const command_spec& run_spec();
int run_command(const cli_args& args);  // troupe run: generate from a prompt, streaming to stdout

const command_spec& bench_spec();
int bench_command(const cli_args& args);  // troupe bench: throughput figures

// `troupe bench serve`: main.cpp dispatches `bench` with the first argument `serve` here (own flags).
const command_spec& bench_serve_spec();
int bench_serve_command(const cli_args& args);  // troupe bench serve: load a running server, report latencies

const command_spec& serve_spec();
int serve_command(const cli_args& args);  // troupe serve: the chat page, OpenAI API and admin console

const command_spec& info_spec();
int info_command(const cli_args& args);  // troupe info: GGUF header, metadata, tensors

const command_spec& tokenize_spec();
int tokenize_command(const cli_args& args);  // troupe tokenize: text <-> token ids

const command_spec& synth_spec();
int synth_command(const cli_args& args);  // troupe synth: a GGUF with seeded random weights

const command_spec& perplexity_spec();
int perplexity_command(const cli_args& args);  // troupe perplexity: llama-perplexity's estimate on a text file

const command_spec& quantize_spec();
int quantize_command(const cli_args& args);  // troupe quantize: offline quantization by a method plugin

const command_spec& template_spec();
int template_command(const cli_args& args);  // troupe template: the prompt a chat template renders

const command_spec& distill_spec();
int distill_command(const cli_args& args);  // troupe distill: train a drafter (Medusa, EAGLE, draft) from a target

}  // namespace troupe::cli
