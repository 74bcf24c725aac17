#include "core/train/loss_curve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace troupe::train {
namespace {

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

status write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    if (!f) return make_error(path + ": cannot write the loss curve");
    f << text;
    if (!f) return make_error(path + ": write failed");
    return {};
}

}  // namespace

status write_curve_csv(const std::string& path, const std::vector<curve_point>& points) {
    std::string s = "step,loss,kl,hard,feature,top1\n";
    for (const curve_point& p : points) {
        s += std::to_string(p.step) + "," + fmt("%.6g", p.loss) + "," + fmt("%.6g", p.kl) + "," + fmt("%.6g", p.hard) +
             "," + fmt("%.6g", p.feature) + "," + fmt("%.4f", p.top1) + "\n";
    }
    return write_text(path, s);
}

status write_curve_svg(const std::string& path, const std::vector<curve_point>& points, const std::string& title) {
    constexpr double w = 720, h = 420, left = 70, right = 20, top = 40, bottom = 50;
    const double pw = w - left - right, ph = h - top - bottom;
    double max_step = 1, max_y = 1e-9;
    for (const curve_point& p : points) {
        max_step = std::max(max_step, static_cast<double>(p.step));
        max_y = std::max({max_y, p.loss, p.kl});
    }
    max_y *= 1.05;
    auto x_of = [&](double step) { return left + pw * step / max_step; };
    auto y_of = [&](double v) { return top + ph * (1.0 - v / max_y); };
    std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", w) + "\" height=\"" +
                    fmt("%.0f", h) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    s += "<text x=\"" + fmt("%.0f", w / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" + title +
         "</text>\n";
    for (int i = 0; i <= 5; ++i) {  // ticks: 6 on each axis, with a light grid
        const double yv = max_y * i / 5, y = y_of(yv), sv = max_step * i / 5, x = x_of(sv);
        s += "<line x1=\"" + fmt("%.1f", left) + "\" y1=\"" + fmt("%.1f", y) + "\" x2=\"" + fmt("%.1f", left + pw) +
             "\" y2=\"" + fmt("%.1f", y) + "\" stroke=\"#eee\"/>\n";
        s += "<text x=\"" + fmt("%.1f", left - 6) + "\" y=\"" + fmt("%.1f", y + 4) + "\" text-anchor=\"end\">" +
             fmt("%.3g", yv) + "</text>\n";
        s += "<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", top + ph + 18) + "\" text-anchor=\"middle\">" +
             fmt("%.0f", sv) + "</text>\n";
    }
    s += "<rect x=\"" + fmt("%.1f", left) + "\" y=\"" + fmt("%.1f", top) + "\" width=\"" + fmt("%.1f", pw) +
         "\" height=\"" + fmt("%.1f", ph) + "\" fill=\"none\" stroke=\"black\"/>\n";
    s += "<text x=\"" + fmt("%.1f", left + pw / 2) + "\" y=\"" + fmt("%.1f", h - 10) +
         "\" text-anchor=\"middle\">step</text>\n";
    auto polyline = [&](double curve_point::*field, const char* color) {
        std::string pts;
        for (const curve_point& p : points) pts += fmt("%.1f", x_of(p.step)) + "," + fmt("%.1f", y_of(p.*field)) + " ";
        return "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.5\" points=\"" + pts +
               "\"/>\n";
    };
    s += polyline(&curve_point::loss, "#1f77b4");
    s += polyline(&curve_point::kl, "#ff7f0e");
    s += "<text x=\"" + fmt("%.1f", left + pw - 100) + "\" y=\"" + fmt("%.1f", top + 16) +
         "\" fill=\"#1f77b4\">loss</text>\n";
    s += "<text x=\"" + fmt("%.1f", left + pw - 100) + "\" y=\"" + fmt("%.1f", top + 32) +
         "\" fill=\"#ff7f0e\">KL</text>\n";
    s += "</svg>\n";
    return write_text(path, s);
}

}  // namespace troupe::train
