// Python's printf-style string formatting ('%s: %d' % (name, n), and jinja2's format filter, which is
// `str(value) % (kwargs or args)`): %s %r %a %d %i %u %x %X %o %c %e %E %f %F %g %G %% with flags (-+ #0),
// width, precision (either may be *) and %(name)s keys, and Python's errors for missing or extra arguments.
#pragma once

#include <string>

#include "core/chat/jinja/callable.h"
#include "core/chat/jinja/value.h"

namespace troupe::jinja {

// `format % args`: a tuple gives the arguments in order, a dict the %(name) keys (or is the one argument
// of a plain %s), anything else is the one argument.
std::string printf_format(const std::string& format, const value& args);

// The format filter ('%s=%d' | format(name, n), '%(k)s' | format(k=v)): jinja2's do_format.
value format_filter(evaluator& ev, const value& v, const call_args& a);

}  // namespace troupe::jinja
