#include "actors/scheduler/draft_controller.h"

#include <algorithm>

#include "core/result.h"

namespace troupe {

draft_controller::draft_controller(draft_controller_params p) : params_(p) {
    TROUPE_ASSERT(params_.max_draft >= 0, "draft controller: max_draft must be >= 0");
    TROUPE_ASSERT(params_.window_steps >= 1, "draft controller: window_steps must be >= 1");
    TROUPE_ASSERT(params_.min_probe_interval >= 1 && params_.max_probe_interval >= params_.min_probe_interval,
                  "draft controller: probe intervals must satisfy 1 <= min <= max");
    TROUPE_ASSERT(params_.smoothing > 0 && params_.smoothing <= 1, "draft controller: smoothing must be in (0, 1]");
}

int32_t draft_controller::bucket_of(int32_t n_running) {
    // floor(log2(4n / 3)): the largest b with 3 * 2^b <= 4n.
    const int64_t four_n = 4 * static_cast<int64_t>(std::max(1, n_running));
    int32_t b = 0;
    while (3 * (int64_t{2} << b) <= four_n) ++b;
    return b;
}

const draft_controller::bucket* draft_controller::find(int32_t n_running) const {
    const auto b = static_cast<size_t>(bucket_of(n_running));
    return b < buckets_.size() ? &buckets_[b] : nullptr;
}

draft_controller::bucket& draft_controller::at(int32_t n_running) {
    const auto b = static_cast<size_t>(bucket_of(n_running));
    if (b >= buckets_.size()) buckets_.resize(b + 1);
    return buckets_[b];
}

bool draft_controller::drafting(int32_t n_running) const {
    const bucket* b = find(n_running);
    return b == nullptr || b->on;
}

double draft_controller::rate_with_drafts(int32_t n_running) const {
    const bucket* b = find(n_running);
    return b ? b->with.tokens_per_s : 0;
}

double draft_controller::rate_without_drafts(int32_t n_running) const {
    const bucket* b = find(n_running);
    return b ? b->without.tokens_per_s : 0;
}

int32_t draft_controller::cap_for(int32_t n_running) const {
    if (!params_.adaptive || params_.max_draft == 0) return params_.max_draft;
    const bucket* b = find(n_running);
    return b == nullptr || mode_of(*b) ? params_.max_draft : 0;
}

void draft_controller::observe(const draft_step_observation& o) {
    if (params_.max_draft == 0 || !o.decode_only || o.n_seqs <= 0) return;
    const bool mode = o.draft_cap > 0;
    (mode ? counters_.n_steps_on : counters_.n_steps_off)++;
    if (!params_.adaptive || o.step_s <= 0) return;
    bucket& b = at(o.n_seqs);
    // A step planned for another batch size (a sequence ended or joined meanwhile) measured another mode.
    if (mode != mode_of(b)) return;
    b.n_steps++;
    b.n_tokens += o.n_tokens;
    b.seconds += o.step_s;
    if (b.n_steps >= params_.window_steps && b.seconds >= params_.min_window_s) close_window(b);
}

void draft_controller::close_window(bucket& b) {
    const bool was_probe = b.probing;
    const bool measured_mode = mode_of(b);
    rate& r = measured_mode ? b.with : b.without;
    const double x = static_cast<double>(b.n_tokens) / b.seconds;
    // The chosen mode's rate is smoothed over its recent windows; a probe's replaces the other mode's estimate,
    // so that a decision compares two measurements taken seconds apart (the machine's speed drifts).
    const bool smooth = r.measured && !was_probe;
    r.tokens_per_s = smooth ? (1 - params_.smoothing) * r.tokens_per_s + params_.smoothing * x : x;
    r.measured = true;
    b.last_window_s[measured_mode ? 1 : 0] = b.seconds;
    const double window_s = b.seconds;
    b.n_steps = 0;
    b.n_tokens = 0;
    b.seconds = 0;
    counters_.n_windows++;
    if (was_probe) counters_.n_probes++;
    b.probing = false;

    const double chosen = b.on ? b.with.tokens_per_s : b.without.tokens_per_s;
    const double other = b.on ? b.without.tokens_per_s : b.with.tokens_per_s;
    const bool both = b.with.measured && b.without.measured;
    if (!was_probe) {
        // The chosen mode fell below the other's last measurement: measure the other again now rather than
        // switching on a stale figure.
        if ((both && chosen < other * (1 - params_.hysteresis)) || (b.seconds_to_probe -= window_s) <= 0)
            b.probing = true;
        return;
    }
    // A probe ends: keep the chosen mode unless the other was faster by more than the hysteresis.
    const bool switch_mode = both && other > chosen * (1 + params_.hysteresis);
    if (switch_mode) {
        b.on = !b.on;
        counters_.n_switches++;
        b.probe_interval = params_.min_probe_interval;
    } else {
        b.probe_interval = std::clamp(2 * b.probe_interval, params_.min_probe_interval, params_.max_probe_interval);
    }
    // The mode now not chosen ran at r times the chosen one's rate: probing it loses (1 - r) of a window.
    if (both && params_.probe_loss_budget > 0) {
        const double faster = std::max(b.with.tokens_per_s, b.without.tokens_per_s);
        const double r = faster > 0 ? std::min(b.with.tokens_per_s, b.without.tokens_per_s) / faster : 1.0;
        const double floor = (1 - r) / params_.probe_loss_budget - 1;
        if (floor > b.probe_interval)
            b.probe_interval = static_cast<int32_t>(std::min<double>(floor, params_.max_probe_interval));
    }
    // The next probe runs the mode not chosen for one window; it waits until the chosen mode has run
    // probe_interval times that mode's last window duration.
    b.seconds_to_probe = b.last_window_s[b.on ? 0 : 1] * b.probe_interval;
}

}  // namespace troupe
