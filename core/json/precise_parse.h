// JSON parsed with every double correctly rounded. Boost.JSON 1.81 reads a number's digits with a fast
// method that can land one unit in the last place away (9.444898071329943 became 9.444898071329945), and a
// chat template prints what it was given: Python's json.loads rounds correctly, so its repr differs. This
// parses with Boost.JSON, then reads each number of the text again with std::from_chars, in document order.
#pragma once

#include <string_view>

#include <boost/json.hpp>

namespace troupe::json_text {

boost::json::value parse_precise(std::string_view text, boost::system::error_code& ec,
                                 const boost::json::parse_options& options = {});

}  // namespace troupe::json_text
