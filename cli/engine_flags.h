// Flags shared by the commands that run the engine (run, bench, and the server later): the config file,
// the model, the device, and the sampling flags, turned into config overrides so that they get the
// config's checks and messages ("--top-p: sampling.top_p: must be between 0 and 1, got 1.5").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_args.h"
#include "core/config/config_loader.h"
#include "core/config/engine_config.h"
#include "core/result.h"

namespace troupe::cli {

// --config, --model, --device, --threads, --log-level, --set.
std::vector<flag_spec> engine_flags();
// --temperature, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --frequency-penalty,
// --presence-penalty, --seed, --max-tokens (-n), --stop, --ignore-eos.
std::vector<flag_spec> sampling_flags();

// The overrides the flags stand for, dedicated flags first, then --set in order.
result<std::vector<config_override>> flag_overrides(const cli_args& args);
// Defaults, --config file, $TROUPE_MODEL, then the flags: the effective config, or every problem at once.
result<engine_config> resolve_cli_config(const cli_args& args);

// Backslash escapes in --prompt and --stop: \n, \t, \r, \\, \", \'.
std::string unescape(std::string_view text);

}  // namespace troupe::cli
