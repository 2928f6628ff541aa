// A plugin built against an ABI this Herald does not speak: abi_version 999. Herald must refuse it without
// reading anything past abi_version.
#include <herald_plugin.h>

static const struct {
    uint32_t abi_version;
} bad_descriptor = {999};

HERALD_PLUGIN_EXPORT const herald_plugin_v1 *herald_plugin_entry_v1(void) {
    return (const herald_plugin_v1 *)&bad_descriptor;
}
