#include "tests/golden/golden_runs.h"

#include <boost/json.hpp>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace troupe::testing {
namespace {

std::vector<int32_t> ids(const boost::json::value& v) {
    std::vector<int32_t> out;
    for (const auto& x : v.as_array()) out.push_back(static_cast<int32_t>(x.to_number<int64_t>()));
    return out;
}

}  // namespace

std::vector<golden_run> load_golden_runs(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    const boost::json::value doc = boost::json::parse(ss.str());
    std::vector<golden_run> runs;
    for (const auto& r : doc.at("runs").as_array()) {
        golden_run g;
        g.model = std::string(r.at("model").as_string());
        g.prompt = std::string(r.at("prompt").as_string());
        g.prompt_ids = ids(r.at("prompt_ids"));
        g.generated_ids = ids(r.at("generated_ids"));
        if (const auto* fs = r.as_object().if_contains("first_step")) {
            golden_first_step f;
            f.argmax = static_cast<int32_t>(fs->at("argmax").to_number<int64_t>());
            f.max_logit = static_cast<float>(fs->at("max_logit").to_number<double>());
            for (const auto& x : fs->at("logits_0_7").as_array()) {
                f.logits_0_7.push_back(static_cast<float>(x.to_number<double>()));
            }
            g.first_step = f;
        }
        runs.push_back(std::move(g));
    }
    return runs;
}

}  // namespace troupe::testing
