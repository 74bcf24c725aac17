/* Test input of sdk_only_includes.sh (never built): a plugin source that includes a troupe header outside the SDK,
 * which the check must refuse. */
#include <troupe/plugin.h>

#include "kernels/ggml_types.h"
