// Python's str methods on UTF-8 text, shared by the methods ('x'.strip()) and the filters (|trim): whitespace,
// line breaks and case as Python's str has them for the scripts unicode_case.h covers.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::jinja {

// str.strip / lstrip / rstrip: `chars` absent strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit: `sep` absent splits on whitespace runs; max_split < 0: no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t max_split,
                                  bool from_right = false);
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
// str.replace: count < 0 replaces all.
std::string py_replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
int64_t py_count(std::string_view s, std::string_view sub);
// str.ljust / rjust / center / zfill (`how` names which) to `width` code points with the one-character `fill`.
std::string py_pad(std::string_view s, int64_t width, std::string_view fill, std::string_view how);

}  // namespace troupe::jinja
