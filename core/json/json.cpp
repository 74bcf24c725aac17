// Boost.JSON, header-only, compiled once for the whole project (include <boost/json.hpp> elsewhere).
#include <boost/json/src.hpp>
