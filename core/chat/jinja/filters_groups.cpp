// Filters that group a sequence's items: groupby (sorted by a key, consecutive equal keys together) and
// slice (n columns), as jinja2 writes them.
#include <algorithm>

#include "core/chat/jinja/evaluator.h"
#include "core/chat/jinja/filter_support.h"

namespace troupe::jinja {

// jinja2's do_groupby: items sorted by attribute (lowercased unless case_sensitive), each run of equal keys a
// (grouper, list) tuple that also answers .grouper and .list; the grouper is the run's first item's value.
value f_groupby(evaluator& ev, const value& v, const call_args& a) {
    a.expect_at_most("groupby()", 3, {"attribute", "default", "case_sensitive"});
    const value attribute = a.get(0, "attribute");
    if (attribute.is_undefined()) throw render_error("groupby() needs an attribute");
    const value fallback = a.get(1, "default", value::none());
    const bool case_sensitive = a.get(2, "case_sensitive", value::boolean(false)).truthy();
    struct keyed {
        value key;      // compared
        value grouper;  // shown
        value item;
    };
    std::vector<keyed> items;
    for (auto& item : iterate(v)) {
        value k = attribute_path(ev, item, attribute);
        if (k.is_undefined() && !fallback.is_none()) k = fallback;
        if (k.is_undefined()) fail_undefined(k);
        items.push_back({sort_key(k, case_sensitive), k, std::move(item)});
    }
    std::stable_sort(items.begin(), items.end(), [](const keyed& x, const keyed& y) { return less(x.key, y.key); });
    std::vector<value> groups;
    for (size_t k = 0; k < items.size();) {
        size_t j = k;
        std::vector<value> members;
        while (j < items.size() && equal(items[j].key, items[k].key)) members.push_back(items[j++].item);
        value group = value::tuple({items[k].grouper, value::list(std::move(members))});
        dict names;
        names.set("grouper", (*group.l)[0]);
        names.set("list", (*group.l)[1]);
        group.d = std::make_shared<dict>(std::move(names));
        groups.push_back(std::move(group));
        k = j;
    }
    return value::list(std::move(groups));
}

// jinja2's do_slice: `slices` lists of consecutive items, the first length % slices of them one longer;
// fill_with pads the shorter ones.
value f_slice(evaluator&, const value& v, const call_args& a) {
    a.expect_at_most("slice()", 2, {"slices", "fill_with"});
    const int64_t slices = need_int(a.get(0, "slices"), "slice() slices");
    if (slices <= 0) throw render_error("slice() slices must be positive");
    const value fill = a.get(1, "fill_with", value::none());
    const std::vector<value> seq = iterate(v);
    const auto length = static_cast<int64_t>(seq.size());
    const int64_t per_slice = length / slices;
    const int64_t with_extra = length % slices;
    std::vector<value> out;
    int64_t offset = 0;
    for (int64_t n = 0; n < slices; ++n) {
        const int64_t start = offset + n * per_slice;
        if (n < with_extra) ++offset;
        const int64_t end = offset + (n + 1) * per_slice;
        std::vector<value> part(seq.begin() + start, seq.begin() + end);
        if (!fill.is_none() && n >= with_extra) part.push_back(fill);
        out.push_back(value::list(std::move(part)));
    }
    return value::list(std::move(out));
}

}  // namespace troupe::jinja
