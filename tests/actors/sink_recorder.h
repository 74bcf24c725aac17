// Records what a request's sink is told, for the actor tests.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/common/request_types.h"

namespace troupe::testing {

struct sink_record {
    std::vector<std::string> deltas;
    std::string text;
    std::optional<finish_reason> finish;
    usage use;
    timings times;
    std::optional<std::string> error;
    int n_endings = 0;

    bool ended() const { return n_endings > 0; }
};

inline request_sink record_into(std::shared_ptr<sink_record> r) {
    request_sink s;
    s.on_text = [r](std::string_view d) {
        r->deltas.emplace_back(d);
        r->text += d;
    };
    s.on_done = [r](finish_reason f, const usage& u, const timings& t) {
        r->finish = f;
        r->use = u;
        r->times = t;
        r->n_endings++;
    };
    s.on_error = [r](const std::string& m) {
        r->error = m;
        r->n_endings++;
    };
    return s;
}

}  // namespace troupe::testing
