// draft_controller: turns speculative decoding down where it costs more than it saves, and back up where it pays.
// A pure class (no clock: each step's measured time comes in with its observation), owned by scheduler_core, which
// asks it for each step's draft cap and tells it what each decode step produced and how long it took from the end
// of the step before (the executor's work plus the scheduling and messages between steps, which a step that
// yields several tokens pays once).
//
// The rule: speculation is worth it when it produces more tokens per second of target work than plain decoding
// at the same batch size. Both rates are measured, not modelled, because what decides them (acceptance, the
// drafter's cost, the target's cost for n extra rows at this batch size, verification) changes with the model,
// the plugin, the text and the load:
//
//   rate(mode) = sum(tokens produced) / sum(step seconds) over a window of at least `window_steps` decode-only
//                steps and `min_window_s` seconds run in that mode (prefill chunks excluded: their cost says
//                nothing about drafts; the time floor keeps a tiny model's sub-millisecond steps from being
//                judged on one scheduling hiccup of a busy machine). The chosen mode's rate is smoothed over its
//                windows (EMA, weight `smoothing` for the newest); the other mode's is its last probe window's.
//
// The mode not chosen is re-measured by a probe window, and decisions are taken only when a probe ends: the other
// mode wins if its probe was faster than the chosen mode's rate by more than `hysteresis`. Both figures are then
// seconds old, so a machine whose speed drifts (other jobs) does not flip the decision. A probe runs once the
// chosen mode has run `probe_interval` times the other mode's last window duration (seconds, not steps: a
// drafting step can cost several plain ones); the interval starts at min_probe_interval and doubles (up to
// max_probe_interval) each time a probe confirms the decision, so a settled decision costs little: with
// speculation off, probes take ~1/(64+1) of the time. It never starts below what keeps the probes' loss within
// probe_loss_budget of the time, given how much slower the probed mode ran. It runs at once, though, when the chosen
// mode's rate falls below the other's last figure (acceptance dropped, the load changed). A switch resets the interval.
// The first window of each bucket measures drafting and the second probes plain decoding, so a fresh bucket decides
// after two windows.
//
// Each batch size is its own case (speculation that pays at batch 1 often does not at 16, where the step is
// compute-bound): the state is kept per bucket of running sequences, 1, 2, 3-5, 6-11, 12-23, 24-47, ...: each
// power of two sits inside its bucket, so a load of 4 or 16 streams that dips by one while a request is replaced
// stays in one bucket.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

struct draft_controller_params {
    int32_t max_draft = 0;            // the configured cap per sequence and step (0: speculation is off)
    bool adaptive = true;             // false: always max_draft (the controller only counts)
    int32_t window_steps = 8;         // decode steps per measured window, at least
    double min_window_s = 0.05;       // and seconds per window, at least
    int32_t min_probe_interval = 16;  // time in the chosen mode between probes, in probe windows' durations
    int32_t max_probe_interval = 64;  // ... after probes keep confirming the decision
    double smoothing = 0.5;           // EMA weight of the newest window's rate
    double hysteresis = 0.03;         // relative margin before the decision changes
    // The share of time probes may cost: a probe of a mode that ran at r times the chosen one's rate loses (1 - r)
    // of its window, so the interval is at least (1 - r) / budget - 1 windows (up to max_probe_interval). Where
    // drafting runs at 0.4x (a compute-bound batch) probes wait 59 windows from the start, not 16.
    double probe_loss_budget = 0.01;
};

// One finished step as the controller sees it.
struct draft_step_observation {
    int32_t n_seqs = 0;       // sequences in the step
    int32_t draft_cap = 0;    // the cap the step was planned with (0: no drafts)
    bool decode_only = true;  // every sequence ran one token (no prefill chunk)
    int64_t n_tokens = 0;     // tokens the step produced (accepted drafts and sampled tokens)
    double step_s = 0;        // the step's time: from the previous step's end to its own
};

struct draft_controller_counters {
    int64_t n_windows = 0;    // measured windows, all buckets
    int64_t n_probes = 0;     // of which probes
    int64_t n_switches = 0;   // decisions changed (on <-> off)
    int64_t n_steps_off = 0;  // decode steps planned without drafts by the controller
    int64_t n_steps_on = 0;   // decode steps planned with drafts
};

class draft_controller {
public:
    explicit draft_controller(draft_controller_params p);

    // The draft cap for a step whose running sequences number n_running.
    int32_t cap_for(int32_t n_running) const;
    void observe(const draft_step_observation& o);

    // The decision for this many running sequences (true: drafting), and its measured rates (tokens/s; 0 until
    // measured).
    bool drafting(int32_t n_running) const;
    double rate_with_drafts(int32_t n_running) const;
    double rate_without_drafts(int32_t n_running) const;
    const draft_controller_counters& counters() const { return counters_; }
    const draft_controller_params& params() const { return params_; }

    static int32_t bucket_of(int32_t n_running);

private:
    struct rate {
        double tokens_per_s = 0;
        bool measured = false;
    };
    struct bucket {
        bool on = true;                // the decision
        bool probing = false;          // the current window runs the other mode
        rate with, without;            // EMAs
        int32_t probe_interval = 0;    // as last set
        double seconds_to_probe = 0;   // chosen-mode time left before the next probe
        double last_window_s[2] = {};  // [mode] the duration of the last window measured in it
        int32_t n_steps = 0;           // in the current window
        int64_t n_tokens = 0;
        double seconds = 0;
    };

    bool mode_of(const bucket& b) const { return b.probing ? !b.on : b.on; }
    const bucket* find(int32_t n_running) const;
    bucket& at(int32_t n_running);
    void close_window(bucket& b);

    draft_controller_params params_;
    std::vector<bucket> buckets_;  // [bucket_of(n)] grown on demand
    draft_controller_counters counters_;
};

}  // namespace troupe
