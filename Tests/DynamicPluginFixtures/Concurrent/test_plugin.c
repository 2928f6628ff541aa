// A C plugin with every call, which lets Herald call it from several threads at once.
#define FIXTURE_NAME "test-plugin"
#define FIXTURE_FLAGS 0
#include "test_plugin_impl.h"
