// loss_curve: the training curve of `troupe distill`, as CSV (one row per logged step) and as an SVG line chart
// drawn here without any library (loss and its KL part against the step, linear axes with a few ticks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace troupe::train {

struct curve_point {
    int64_t step = 0;
    double loss = 0;     // what is minimised (mean over the batch's rows, summed over heads)
    double kl = 0;       // its distribution part: KL to the target (reverse KL for --loss reverse-kl)
    double hard = 0;     // cross-entropy of the hard labels (reported for every loss; in `loss` for kl+hard)
    double feature = 0;  // EAGLE: smooth-L1 of the features (0 elsewhere)
    double top1 = 0;     // fraction of the batch's rows whose argmax matches the target's
};

// "step,loss,kl,hard,feature,top1" and one line per point.
status write_curve_csv(const std::string& path, const std::vector<curve_point>& points);
status write_curve_svg(const std::string& path, const std::vector<curve_point>& points, const std::string& title);

}  // namespace troupe::train
